// Package demoapp is the science of the demo project: how a job's input is
// made from its name, and the correct output for an input. Output is a pure
// function of input, so redundant results can be compared bit for bit and a
// test can tell a correct output from a forged one long after the input file
// is deleted.
package demoapp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strings"
)

// AppName is the demo app's name in the app table.
const AppName = "demo"

// InputSize is the size of a demo input file in bytes.
const InputSize = 4096

// Input returns the input file of job name: InputSize pseudo-random bytes
// seeded by the name.
func Input(name string) []byte {
	seed := sha256.Sum256([]byte(name))
	r := rand.New(rand.NewChaCha8(seed))
	out := make([]byte, InputSize)
	for i := 0; i < len(out); i += 8 {
		binary.LittleEndian.PutUint64(out[i:], r.Uint64())
	}
	return out
}

// Compute returns the correct output for input: the SHA-256 of the input
// iterated rounds times, with a short summary line, as text.
func Compute(input []byte, rounds int) []byte {
	sum := sha256.Sum256(input)
	for i := 1; i < rounds; i++ {
		sum = sha256.Sum256(sum[:])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "bytes %d\n", len(input))
	fmt.Fprintf(&b, "rounds %d\n", rounds)
	fmt.Fprintf(&b, "digest %s\n", hex.EncodeToString(sum[:]))
	return []byte(b.String())
}

// Rounds is the work per job in the demo project.
const Rounds = 1000

// Output returns the correct output of job name.
func Output(name string) []byte { return Compute(Input(name), Rounds) }

// FailMarker at the start of a job's input makes the demo app fail on
// purpose (exit status 3), on every host: a job that can never succeed, for
// exercising error limits and holds.
const FailMarker = "FAIL"

// Fails reports whether the demo app fails on input.
func Fails(input []byte) bool { return bytes.HasPrefix(input, []byte(FailMarker)) }
