// Package demoapp is the science of the demo project: how a job's inputs
// are made, and the correct outputs for them. Outputs are a pure function of
// the inputs and the command line, so redundant results can be compared bit
// for bit and a test can tell a correct output from a forged one long after
// the input files are deleted.
//
// A demo job has the shape of a real project's (see InputTemplate and
// OutputTemplate): its own input "in" (stored gzip'd too), a "model" shared
// by every job (staged once, sticky on the hosts), a small "params" file, the
// command line "--rounds N", and two outputs: "out", validated bit for bit,
// and "log", not validated. A job given only "in" (the built-in templates)
// is computed the same way with no model and no params, so one-file demo
// jobs submitted by hand still run.
package demoapp

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// AppName is the demo app's name in the app table.
const AppName = "demo"

// InputSize is the size of a demo input file in bytes.
const InputSize = 4096

// ModelSize is the size of the shared model in bytes.
const ModelSize = 16 << 10

// Open (logical) names of the demo job's files, as its templates name them.
const (
	InName     = "in"
	ModelName  = "model"
	ParamsName = "params"
	OutName    = "out"
	LogName    = "log"
)

// ModelFile and ParamsFile are the names the model and the params file
// are staged under as shared files; jobs refer to the latest staged by
// them. Both are the same for every job, so they are staged once: a job
// brings only its own input.
const (
	ModelFile  = "demo_model"
	ParamsFile = "demo_params"
)

// InputTemplate is the demo job's input template (BOINC's format): the
// job's own input, the shared model (sticky), the shared params file
// (gzip'd copy offered), and the command line. Every file is copied into
// the slot directory: the demo app does not resolve logical names.
const InputTemplate = `<input_template>
<file_info><number>0</number></file_info>
<file_info><number>1</number><sticky/></file_info>
<file_info><number>2</number><gzip/></file_info>
<workunit>
  <file_ref><open_name>in</open_name><copy_file/></file_ref>
  <file_ref><open_name>model</open_name><copy_file/></file_ref>
  <file_ref><open_name>params</open_name><copy_file/></file_ref>
  <command_line>--rounds 1000</command_line>
</workunit>
</input_template>
`

// OutputTemplate is the demo job's output template: "out", validated, and
// "log", optional and not validated.
const OutputTemplate = `<output_template>
<file_info><name><OUTFILE_0/></name><generated_locally/><upload_when_present/><max_nbytes>65536</max_nbytes><url><UPLOAD_URL/></url></file_info>
<file_info><name><OUTFILE_1/></name><generated_locally/><upload_when_present/><max_nbytes>65536</max_nbytes><url><UPLOAD_URL/></url></file_info>
<result>
  <file_ref><file_name><OUTFILE_0/></file_name><open_name>out</open_name><copy_file/></file_ref>
  <file_ref><file_name><OUTFILE_1/></file_name><open_name>log</open_name><copy_file/><optional/><no_validate/></file_ref>
</result>
</output_template>
`

// Input returns the input file of job name: InputSize pseudo-random bytes
// seeded by the name.
func Input(name string) []byte { return pseudoRandom(name, InputSize) }

// Model returns the shared model every demo job reads.
func Model() []byte { return pseudoRandom("demo model, version 1", ModelSize) }

// Params returns the params file of a demo job. It is the same for every
// job: a known-answer job keeps its twin's files but its own input, so an
// output may depend on nothing job-specific but "in".
func Params() []byte { return []byte("scale 3\nseed 7\n") }

// pseudoRandom returns n pseudo-random bytes seeded by seed.
func pseudoRandom(seed string, n int) []byte {
	r := rand.New(rand.NewChaCha8(sha256.Sum256([]byte(seed))))
	out := make([]byte, n)
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

// Files are a job's input files in template order ("in", then "model" and
// "params" if the job has them).
type Files [][]byte

// Out returns the correct "out" for files and rounds: Compute of the files
// one after the other, so a job of "in" alone gets Compute(in, rounds).
func Out(files Files, rounds int) []byte { return Compute(bytes.Join(files, nil), rounds) }

// Log returns the "log" the demo app writes beside out: what it read and
// did. It is deterministic too, though not validated.
func Log(files Files, rounds int) []byte {
	var b strings.Builder
	names := []string{InName, ModelName, ParamsName}
	for i, f := range files {
		name := "input" + strconv.Itoa(i)
		if i < len(names) {
			name = names[i]
		}
		sum := sha256.Sum256(f)
		fmt.Fprintf(&b, "read %s: %d bytes, sha256 %s\n", name, len(f), hex.EncodeToString(sum[:8]))
	}
	fmt.Fprintf(&b, "rounds %d\n", rounds)
	return []byte(b.String())
}

// Rounds is the work per job in the demo project.
const Rounds = 1000

// RoundsFlag on the command line sets the rounds: "--rounds N".
const RoundsFlag = "--rounds"

// CommandLine is the command line of a demo job of rounds rounds.
func CommandLine(rounds int) string { return RoundsFlag + " " + strconv.Itoa(rounds) }

// ParseRounds returns the rounds args ask for ("--rounds N" or
// "--rounds=N"), Rounds if they do not say.
func ParseRounds(args []string) (int, error) {
	rounds := Rounds
	for i := 0; i < len(args); i++ {
		v, ok := strings.CutPrefix(args[i], RoundsFlag+"=")
		if !ok {
			if args[i] != RoundsFlag {
				continue
			}
			if i+1 >= len(args) {
				return 0, fmt.Errorf("%s: want a number of rounds after it", RoundsFlag)
			}
			i++
			v = args[i]
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%s %q: want a whole number of at least 1", RoundsFlag, v)
		}
		rounds = n
	}
	return rounds, nil
}

// GeneratedFiles are the input files of the work generator's demo job
// name: its input, the model and the params.
func GeneratedFiles(name string) Files { return Files{Input(name), Model(), Params()} }

// Output returns the correct "out" of the work generator's demo job name
// (GeneratedFiles, Rounds).
func Output(name string) []byte { return Out(GeneratedFiles(name), Rounds) }

// SingleOutput returns the correct "out" of a demo job of name given only
// its input Input(name), with the built-in templates (as jobs submitted by
// hand with one file are).
func SingleOutput(name string) []byte { return Compute(Input(name), Rounds) }

// FailMarker at the start of a job's input makes the demo app fail on
// purpose (exit status 3), on every host: a job that can never succeed, for
// exercising error limits and holds.
const FailMarker = "FAIL"

// Fails reports whether the demo app fails on input.
func Fails(input []byte) bool { return bytes.HasPrefix(input, []byte(FailMarker)) }
