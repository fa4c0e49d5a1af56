//go:build unix

package extcmd

import (
	"os/exec"
	"syscall"
)

// killProcessGroup starts cmd in a process group of its own and makes its
// cancellation kill the whole group, so a shell script's children die with
// it instead of running on after a timeout.
func killProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
