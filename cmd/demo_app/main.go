// Command demo_app is the demo project's science as a plain program for the
// real BOINC client: it uses no BOINC API, so the client must copy its input
// into the slot directory and its output out of it (<copy_file/>, PROTOCOL.md
// §7).
//
// In its working directory it reads the file "in" and, if the job has them,
// "model" and "params"; takes the rounds from its command line (--rounds N,
// default demoapp.Rounds); writes "out" = demoapp.Out (the bytes the
// validator expects) and "log" = demoapp.Log; then writes
// "boinc_finish_called" holding "0\n" and exits 0: without that file the
// client would restart the program after a zero exit.
//
// To let tests make a job that comes back as a compute error, it fails on
// purpose, exiting 3 without the finish file, when its command line holds
// --fail or its input starts with the bytes "FAIL".
package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/taskserver/taskserver/internal/demoapp"
)

// File names in the slot directory: the open names of the job's files and
// the client's exit marker.
const finishName = "boinc_finish_called"

// Exit codes. The client reports a non-zero code as the result's
// exit_status (a compute error).
const (
	exitOK = 0
	// exitError is an I/O failure (no input, output not writable) or a
	// bad command line.
	exitError = 1
	// exitFail is the deliberate failure.
	exitFail = 3
)

// failFlag on the command line, or demoapp.FailMarker at the start of the
// input, asks for the deliberate failure.
const failFlag = "--fail"

// The exit code is the program's whole interface with the client, so main
// sets it itself rather than through daemon.Main.
func main() { os.Exit(run(os.Args[1:], ".", os.Stderr)) }

// run does the job in dir and returns the exit code; stderr ends up in the
// result's stderr_out.
func run(args []string, dir string, stderr io.Writer) int {
	input, err := os.ReadFile(filepath.Join(dir, demoapp.InName))
	if err != nil {
		fmt.Fprintf(stderr, "demo_app: read input: %v\n", err)
		return exitError
	}
	if slices.Contains(args, failFlag) || demoapp.Fails(input) {
		fmt.Fprintln(stderr, "demo_app: failing on purpose")
		return exitFail
	}
	rounds, err := demoapp.ParseRounds(args)
	if err != nil {
		fmt.Fprintf(stderr, "demo_app: command line: %v\n", err)
		return exitError
	}
	files := demoapp.Files{input}
	// The model and params come together or not at all: a job of the
	// built-in templates has neither, and one without the other is a
	// template that does not fit the app.
	for _, name := range []string{demoapp.ModelName, demoapp.ParamsName} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		switch {
		case err == nil:
			files = append(files, b)
		case !errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(stderr, "demo_app: read %s: %v\n", name, err)
			return exitError
		}
	}
	if len(files) == 2 {
		fmt.Fprintf(stderr, "demo_app: the job has only one of %s and %s\n", demoapp.ModelName, demoapp.ParamsName)
		return exitError
	}
	if err := writeFile(filepath.Join(dir, demoapp.LogName), demoapp.Log(files, rounds)); err != nil {
		fmt.Fprintf(stderr, "demo_app: write log: %v\n", err)
		return exitError
	}
	if err := writeFile(filepath.Join(dir, demoapp.OutName), demoapp.Out(files, rounds)); err != nil {
		fmt.Fprintf(stderr, "demo_app: write output: %v\n", err)
		return exitError
	}
	// The finish file comes last: once it exists the client takes the
	// outputs as complete.
	if err := writeFile(filepath.Join(dir, finishName), []byte("0\n")); err != nil {
		fmt.Fprintf(stderr, "demo_app: write finish file: %v\n", err)
		return exitError
	}
	fmt.Fprintf(stderr, "demo_app: %d input files, %d rounds\n", len(files), rounds)
	return exitOK
}

// writeFile writes data to path and syncs it, so a crash of the host just
// after exit cannot leave the client a short output it believes complete.
func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
