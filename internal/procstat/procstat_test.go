package procstat

import (
	"net"
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis must not shift fields.
	line := []byte("1234 (my (odd) prog) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 75 0 0 20 0 4 0 100 0 0")
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3.25 {
		t.Fatalf("cpu = %v, want 3.25 (250 + 75 ticks)", got)
	}
	if _, err := parseStatCPU([]byte("garbage")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestReadSelfCountsCPU(t *testing.T) {
	before, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(300 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	after, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.CPUSeconds <= 0 {
		t.Fatalf("300 ms of spinning counted %v CPU seconds", d.CPUSeconds)
	}
	if after.RSSBytes <= 0 || after.PeakRSSBytes < after.RSSBytes {
		t.Fatalf("memory: rss %d peak %d", after.RSSBytes, after.PeakRSSBytes)
	}
	_ = x
}

func TestReadMissingProcess(t *testing.T) {
	if _, err := Read(1 << 30); err == nil {
		t.Fatal("a process that cannot exist was read")
	}
}

func TestSocketsCountsOpenConnections(t *testing.T) {
	before, err := Sockets(os.Getpid())
	if err != nil {
		t.Fatalf("Sockets(self): %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "not-a-socket")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := Sockets(os.Getpid()); err != nil || n != before+3 {
		t.Errorf("Sockets(self) with a listener and both ends of a connection open = %d, %v; want %d", n, err, before+3)
	}
	c.Close()
	s.Close()
	f.Close()
	if _, err := Sockets(1 << 30); err == nil {
		t.Error("Sockets(no such process) succeeded, want an error")
	}
}
