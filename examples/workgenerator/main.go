// Command workgenerator is a worked example of a project's own work
// generator: the stock daemon keeps the app's backlog of unsent instances
// at --unsent-target, and this program makes each new job's input file, a
// Monte Carlo run's parameters:
//
//	seed 9313719034251342512
//	samples 1000000
//
// The seed comes from the job's name, so the same job always gets the
// same input, and no two jobs share one. The daemon's flags (database,
// --app, --unsent-target, --total-jobs, --job-prefix, the job parameters
// --min-quorum, --delay-bound, ...) are the stock work_generator's;
// --samples is its own.
//
//	go run ./workgenerator --config project.yaml --app demo --samples 1000000
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/workgenerator"
)

func main() { workgenerator.Main(program()) }

// program is the daemon: the stock work generator with Monte Carlo inputs.
func program() workgenerator.Program {
	return workgenerator.Program{
		Usage: "keep the app's backlog full of Monte Carlo jobs, each with its own seed",
		Flags: []job.Flag{{Name: "samples", Value: "1000000", Usage: "samples each job draws"}},
		NewInputMaker: func(env job.Env) (workgenerator.InputMaker, error) {
			n, err := strconv.ParseInt(env.Flags["samples"], 10, 64)
			if err != nil || n < 1 {
				return nil, fmt.Errorf("--samples %q: want a whole number >= 1", env.Flags["samples"])
			}
			return monteCarlo{samples: n}, nil
		},
	}
}

// monteCarlo makes Monte Carlo inputs of a number of samples.
type monteCarlo struct{ samples int64 }

// Input returns the job's parameters: its seed and the samples to draw.
func (m monteCarlo) Input(_ context.Context, name string) ([]byte, error) {
	sum := sha256.Sum256([]byte(name))
	return fmt.Appendf(nil, "seed %d\nsamples %d\n", binary.BigEndian.Uint64(sum[:8]), m.samples), nil
}
