package projectrun

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sh describes a shell script as a program; with addrs, its $2 is the
// --addr-file it is given.
func sh(t *testing.T, name, script string, addrs bool) *Proc {
	return New(Spec{Name: name, Bin: "/bin/sh", Args: []string{"-c", script, "sh"}, LogDir: t.TempDir(), ReportsAddrs: addrs})
}

func TestStopCleanExitIsNoError(t *testing.T) {
	p := sh(t, "sleeper", "trap 'exit 0' TERM; sleep 30 & wait", false)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.Running() || p.PID() == 0 {
		t.Fatal("not running after Start")
	}
	time.Sleep(100 * time.Millisecond) // the trap is set
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatalf("Stop = %v, want nil for a clean exit", err)
	}
	if p.Running() || p.Crashes() != 0 {
		t.Fatalf("after Stop: running %v, crashes %d; want stopped, none", p.Running(), p.Crashes())
	}
}

func TestStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	p := sh(t, "stubborn", "trap '' TERM; sleep 30 & wait; sleep 30", false)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the trap is set
	err := p.Stop(200 * time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not stop within") {
		t.Fatalf("Stop = %v, want a did-not-stop error", err)
	}
	if p.Running() {
		t.Fatal("still running after Stop")
	}
}

func TestKilledIsNoCrashAndRestarts(t *testing.T) {
	p := sh(t, "victim", "sleep 30", false)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if p.Running() || p.Crashes() != 0 {
		t.Fatalf("after Kill: running %v, crashes %d; want stopped, none", p.Running(), p.Crashes())
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("Stop after Kill = %v, want nil", err)
	}
	p.SetArgs([]string{"-c", "exit 3", "sh"})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Crashes() != 1 || p.Err() == nil {
		t.Fatalf("a run that exited 3 on its own: crashes %d, err %v; want 1 and its exit error", p.Crashes(), p.Err())
	}
	if err := p.Stop(time.Second); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Stop = %v, want the exit error", err)
	}
}

func TestWaitAddrReadsTheReportedAddress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p := sh(t, "server", `sleep 0.2; printf 'addr 127.0.0.1:4321\nlisten 127.0.0.1:1234\n' > "$2.tmp"; mv "$2.tmp" "$2"; sleep 30`, true)
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(time.Second)
	if got := p.Addr("listen"); got != "" {
		t.Fatalf("Addr before the program reported = %q, want \"\"", got)
	}
	got, err := p.WaitAddr(ctx, "listen")
	if err != nil || got != "127.0.0.1:1234" {
		t.Fatalf("WaitAddr(listen) = %q, %v; want 127.0.0.1:1234", got, err)
	}
	if got := p.Addr("addr"); got != "127.0.0.1:4321" {
		t.Fatalf("Addr(addr) = %q, want 127.0.0.1:4321", got)
	}
	p.Kill()
	if got := p.Addr("listen"); got != "" {
		t.Fatalf("Addr after the run ended = %q, want \"\"", got)
	}
	// A run that exits without reporting fails the wait at once.
	p.SetArgs([]string{"-c", "exit 0", "sh"})
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitAddr(ctx, "listen"); err == nil || !strings.Contains(err.Error(), "exited before") {
		t.Fatalf("WaitAddr on a run that exited = %v, want an exited error", err)
	}
}
