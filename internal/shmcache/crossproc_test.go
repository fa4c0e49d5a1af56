package shmcache

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// helperEnv names the cache file a helper claimer process works on; unset,
// TestHelperClaimer is skipped.
const helperEnv = "SHMCACHE_TEST_CLAIMER_PATH"

// TestCrossProcessClaimsAreExclusive races several claimer processes (this
// test binary re-executed as TestHelperClaimer) over one file while the
// test, as the feeder, fills slots with unique result ids. Every id must be
// claimed and released by exactly one process.
//
// Not parallel: between fork and exec a child holds copies of every open
// descriptor, including the lock of another test's feeder, which would then
// see its lock as taken.
func TestCrossProcessClaimsAreExclusive(t *testing.T) {
	const (
		claimers = 4
		nslots   = 16
		nresults = 3000
	)
	path := filepath.Join(t.TempDir(), "cache")
	c, err := Create(path, nslots)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	type proc struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   chan []byte
	}
	procs := make([]proc, claimers)
	for k := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperClaimer$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnv+"="+path)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start claimer %d: %v", k, err)
		}
		out := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(stdout)
			out <- b
		}()
		procs[k] = proc{cmd, stdin, out}
	}
	defer func() {
		for _, p := range procs {
			p.stdin.Close()
		}
	}()

	deadline := time.Now().Add(45 * time.Second)
	slot := 0
	for id := int64(1); id <= nresults; id++ {
		for !c.Fill(slot, entry(id)) {
			slot = (slot + 1) % nslots
			if slot == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("cache still full after 45s at result %d: claimers stuck", id)
				}
				time.Sleep(20 * time.Microsecond)
			}
		}
	}
	for i := 0; i < nslots; i++ {
		for st, _ := c.Slot(i); st != SlotEmpty; st, _ = c.Slot(i) {
			if time.Now().After(deadline) {
				t.Fatalf("slot %d still %v after 45s, want emptied by the claimers", i, st)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}

	got := map[int64]int{}
	for k, p := range procs {
		p.stdin.Close()
		out := <-p.out
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("claimer %d: %v\n%s", k, err, out)
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(line, "released "):
				id, err := strconv.ParseInt(strings.TrimPrefix(line, "released "), 10, 64)
				if err != nil {
					t.Fatalf("claimer %d printed %q", k, line)
				}
				got[id]++
				n++
			case strings.HasPrefix(line, "ERROR"):
				t.Errorf("claimer %d: %s", k, line)
			}
		}
		t.Logf("claimer %d released %d results", k, n)
	}
	for id := int64(1); id <= nresults; id++ {
		if got[id] != 1 {
			t.Errorf("result %d was released %d times across claimers, want exactly once", id, got[id])
		}
	}
	if len(got) != nresults {
		t.Errorf("claimers released %d distinct results, want %d", len(got), nresults)
	}
}

// TestHelperClaimer is not a test: it is the claimer process of
// TestCrossProcessClaimsAreExclusive. It claims whatever it finds, puts
// about one in four back with Unclaim, releases the rest and prints
// "released <id>", until its stdin closes and the cache is drained.
func TestHelperClaimer(t *testing.T) {
	path := os.Getenv(helperEnv)
	if path == "" {
		t.Skip("helper process for TestCrossProcessClaimsAreExclusive")
	}
	c, err := Open(path)
	if err != nil {
		fmt.Printf("ERROR open: %v\n", err)
		return
	}
	defer c.Close()
	var done atomic.Bool
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		done.Store(true)
	}()
	w := bufio.NewWriter(os.Stdout)
	defer w.Flush()
	pid := int32(os.Getpid())
	n := c.NSlots()
	for {
		// Read done before the sweep: the feeder closes stdin only once the
		// cache is drained, so a sweep that starts after that finds nothing.
		finished := done.Load()
		busy := false
		start := rand.IntN(n)
		for k := 0; k < n; k++ {
			i := (start + k) % n
			cl, ok := c.Claim(i, pid, time.Now().Unix())
			if !ok {
				continue
			}
			busy = true
			if cl.Entry != entry(cl.Entry.ResultID) {
				fmt.Fprintf(w, "ERROR torn entry in slot %d: %+v\n", i, cl.Entry)
			}
			if rand.IntN(4) == 0 {
				if !c.Unclaim(cl) {
					fmt.Fprintf(w, "ERROR Unclaim of slot %d (result %d) refused\n", i, cl.Entry.ResultID)
				}
				continue
			}
			if !c.Release(cl) {
				fmt.Fprintf(w, "ERROR Release of slot %d (result %d) refused\n", i, cl.Entry.ResultID)
				continue
			}
			fmt.Fprintf(w, "released %d\n", cl.Entry.ResultID)
		}
		if !busy {
			if finished {
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
}
