// Package procstat reads what a Linux process has used so far from /proc: CPU
// seconds, bytes read and written, and resident memory. The benchmarks take
// a Usage before and after a phase and report the difference, the way the
// task-server paper measured each program and the database server.
package procstat

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat. Linux exports them
// in USER_HZ, which is 100 on every architecture Go runs on.
const userHZ = 100

// Usage is what one process has used since it started.
type Usage struct {
	// CPUSeconds is user plus system time.
	CPUSeconds float64
	// ReadBytes and WriteBytes are the bytes the process made the storage
	// layer fetch and send (read_bytes, write_bytes of /proc/<pid>/io); zero
	// when that file cannot be read (another user's process, no root).
	ReadBytes, WriteBytes int64
	// RSSBytes is the resident set now and PeakRSSBytes its high-water mark.
	RSSBytes, PeakRSSBytes int64
}

// Sub returns u minus earlier: what the process used between two samples.
// Memory figures are u's, not differences.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{
		CPUSeconds:   u.CPUSeconds - earlier.CPUSeconds,
		ReadBytes:    u.ReadBytes - earlier.ReadBytes,
		WriteBytes:   u.WriteBytes - earlier.WriteBytes,
		RSSBytes:     u.RSSBytes,
		PeakRSSBytes: u.PeakRSSBytes,
	}
}

// Read samples process pid. Only the CPU time is required: I/O and memory are
// left zero when their files cannot be read.
func Read(pid int) (Usage, error) {
	var u Usage
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return u, fmt.Errorf("read CPU time of process %d: %w", pid, err)
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return u, fmt.Errorf("process %d: %w", pid, err)
	}
	u.CPUSeconds = cpu
	if io, err := os.ReadFile(filepath.Join(dir, "io")); err == nil {
		f := parseFields(io)
		u.ReadBytes, u.WriteBytes = f["read_bytes"], f["write_bytes"]
	}
	if st, err := os.ReadFile(filepath.Join(dir, "status")); err == nil {
		f := parseFields(st)
		// VmRSS and VmHWM are in kB.
		u.RSSBytes, u.PeakRSSBytes = f["VmRSS"]*1024, f["VmHWM"]*1024
	}
	return u, nil
}

// parseStatCPU returns utime + stime of a /proc/<pid>/stat line in seconds.
// The command name (field 2) may hold spaces and parentheses, so the fields
// are counted from the last ')'.
func parseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc stat: no command name")
	}
	// After ")": state (field 3) ... utime is field 14, stime field 15.
	fields := strings.Fields(string(stat[i+1:]))
	if len(fields) < 13 {
		return 0, errors.New("malformed /proc stat: too few fields")
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("malformed /proc stat: %w", err)
	}
	return float64(utime+stime) / userHZ, nil
}

// parseFields reads "name: value [unit]" lines into integers; lines that do
// not parse are skipped.
func parseFields(b []byte) map[string]int64 {
	out := map[string]int64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil {
			out[strings.TrimSpace(name)] = v
		}
	}
	return out
}

// DBServerPID returns the process id of the database server db is connected
// to, from the server's pid file (@@pid_file), or else by looking for the one
// mariadbd or mysqld process on this machine. It fails when the server is on
// another machine or cannot be told apart.
func DBServerPID(ctx context.Context, db *sql.DB) (int, error) {
	var pidFile sql.NullString
	if err := db.QueryRowContext(ctx, `SELECT @@pid_file`).Scan(&pidFile); err == nil && pidFile.Valid {
		if b, err := os.ReadFile(pidFile.String); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && isDBServer(pid) {
				return pid, nil
			}
		}
	}
	var found []int
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("find the database server: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && isDBServer(pid) {
			found = append(found, pid)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return 0, errors.New("find the database server: no mariadbd or mysqld process on this machine")
	default:
		return 0, fmt.Errorf("find the database server: %d mariadbd/mysqld processes and the server's pid file is unreadable", len(found))
	}
}

// isDBServer reports whether pid runs mariadbd or mysqld.
func isDBServer(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return false
	}
	c := strings.TrimSpace(string(b))
	return c == "mariadbd" || c == "mysqld"
}

// Sockets returns how many sockets process pid has open (the entries of
// /proc/<pid>/fd that link to "socket:[inode]"): its network connections
// and listeners.
func Sockets(pid int) (int, error) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("list open files of process %d: %w", pid, err)
	}
	n := 0
	for _, e := range entries {
		// A descriptor closed since the listing has no link: not counted.
		if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(link, "socket:") {
			n++
		}
	}
	return n, nil
}
