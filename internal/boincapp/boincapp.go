// Package boincapp is the Go side of the real BOINC-API demo application
// (apps/boinc_demo/boinc_demo.cpp, built by `make boinc-app`): where the
// built program is, the inputs of a job for it, and the "out" it must
// write, so that a test can tell a correct result from a wrong one.
package boincapp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/taskserver/taskserver/internal/demoapp"
)

// Logical names of the application's files, as its input and output
// templates name them (the app opens them through
// boinc_resolve_filename_s).
const (
	InName     = "in"     // the job's own input
	SharedName = "shared" // one sticky input shared by every job
	ParamsName = "params" // stored gzip'd on the server
	OutName    = "out"    // the validated result
	LogName    = "log"    // about LogSize bytes, not validated
)

// LogSize is the least size of the "log" output: large enough that its
// upload can be interrupted and resumed.
const LogSize = 300 * 1024

// EnvPath names the environment variable that gives the built program's
// path; without it, Path looks for bin/boinc_demo in the module.
const EnvPath = "TASKSERVER_BOINC_APP"

// Path returns the built application: $TASKSERVER_BOINC_APP, or
// bin/boinc_demo at the module's root (where `make boinc-app` puts it).
func Path() (string, error) {
	if p := os.Getenv(EnvPath); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w (build it with: make boinc-app)", EnvPath, p, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "bin", "boinc_demo")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("the BOINC-API demo app is not built (%w): build it with make boinc-app, or set %s", err, EnvPath)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory: set " + EnvPath + " to the built boinc_demo")
		}
		dir = parent
	}
}

// Input returns job's own input ("in").
func Input(job string) []byte { return demoapp.Input(job) }

// Shared returns the input every job shares ("shared"), 4 KiB.
func Shared() []byte { return demoapp.Input("boinc_demo shared database") }

// Params returns job's small parameter file ("params").
func Params(job string) []byte { return []byte("job " + job + "\nscale 3\n") }

// The FNV-1a 64-bit hash, as the application computes it.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// State returns the application's state after rounds rounds of work on
// the inputs: the one number its checkpoint holds.
func State(in, shared, params []byte, rounds int64) uint64 {
	h := fnv(fnv(fnv(fnvOffset, in), shared), params)
	var b [16]byte
	for r := int64(0); r < rounds; r++ {
		binary.LittleEndian.PutUint64(b[:8], h)
		binary.LittleEndian.PutUint64(b[8:], uint64(r))
		h = fnv(fnvOffset, b[:])
	}
	return h
}

// Output returns the "out" the application writes for the inputs and
// --rounds.
func Output(in, shared, params []byte, rounds int64) []byte {
	return []byte(fmt.Sprintf("in %d bytes\nshared %d bytes\nparams %d bytes\nrounds %d\ndigest %016x\n",
		len(in), len(shared), len(params), rounds, State(in, shared, params, rounds)))
}
