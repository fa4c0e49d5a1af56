package chaos

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/internal/assimilator"
)

// Handled-log line kinds written by Record.
const (
	recordDone    = "done"    // the job was handed over: name, error mask, output digest
	recordMissing = "missing" // an output file of a successful job was gone: deleted too early
)

// Record is the assimilation handler the chaos run gives the assimilator
// (`chaos record --log FILE`): it appends "done <job> <error_mask>
// <sha256 of the outputs, or ->" to log, one write and an fsync per call,
// so a kill after it returns cannot lose the line. The job comes in the
// assimilator's TASKSERVER_* variables and outputs are the canonical
// instance's files. A missing output file is logged as "missing <job>
// <path>" and is an error, so the job stays ready and is retried.
func Record(logPath string, outputs []string) error {
	name := os.Getenv(assimilator.EnvJobName)
	if name == "" {
		return fmt.Errorf("record: %s is not set (run by the assimilator's command handler)", assimilator.EnvJobName)
	}
	mask, err := strconv.ParseInt(os.Getenv(assimilator.EnvErrorMask), 10, 64)
	if err != nil {
		return fmt.Errorf("record: %s: %w", assimilator.EnvErrorMask, err)
	}
	digest := "-"
	if len(outputs) > 0 {
		h := sha256.New()
		for _, p := range outputs {
			b, err := os.ReadFile(p)
			if errors.Is(err, os.ErrNotExist) {
				return errors.Join(fmt.Errorf("record job %s: output %s is gone", name, p),
					appendLine(logPath, fmt.Sprintf("%s %s %s\n", recordMissing, name, p)))
			}
			if err != nil {
				return fmt.Errorf("record job %s: %w", name, err)
			}
			h.Write(b)
		}
		digest = hex.EncodeToString(h.Sum(nil))
	}
	return appendLine(logPath, fmt.Sprintf("%s %s %d %s\n", recordDone, name, mask, digest))
}

// appendLine appends line with one write (O_APPEND: lines of concurrent
// handlers never interleave) and makes it durable.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open handled log: %w", err)
	}
	if _, err := f.WriteString(line); err != nil {
		f.Close()
		return fmt.Errorf("append to handled log: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync handled log: %w", err)
	}
	return f.Close()
}

// delivery is one line of the handled log.
type delivery struct {
	mask   int64
	digest string
}

// handledLog is the handled log read back: every delivery per job, and
// the outputs found missing.
type handledLog struct {
	done    map[string][]delivery
	missing map[string]int
}

// readHandled reads the log Record wrote. A last line cut short by a kill
// (no newline) is ignored: Record had not returned, so the job was not
// marked and is delivered again.
func readHandled(path string) (handledLog, error) {
	h := handledLog{done: map[string][]delivery{}, missing: map[string]int{}}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return h, err
	}
	defer f.Close()
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadString('\n')
		if err != nil {
			break
		}
		fs := strings.Fields(line)
		switch {
		case len(fs) == 4 && fs[0] == recordDone:
			mask, perr := strconv.ParseInt(fs[2], 10, 64)
			if perr != nil {
				return h, fmt.Errorf("handled log line %d: %w", n, perr)
			}
			h.done[fs[1]] = append(h.done[fs[1]], delivery{mask: mask, digest: fs[3]})
		case len(fs) == 3 && fs[0] == recordMissing:
			h.missing[fs[1]]++
		default:
			return h, fmt.Errorf("handled log line %d: unexpected %q", n, line)
		}
	}
	return h, nil
}
