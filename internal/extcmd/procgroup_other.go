//go:build !unix

package extcmd

import "os/exec"

// killProcessGroup leaves cmd's default cancellation (kill the process)
// where process groups do not exist.
func killProcessGroup(*exec.Cmd) {}
