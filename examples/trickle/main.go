// Command trickle (example) is a worked example of a project's own trickle
// handler: a Go Handler plugged into the stock daemon with trickle.Main.
// For each trickle-up message it records the task's latest reported
// progress (<fraction_done>) in <progress-dir>/<task name>, and answers a
// message of variety "ask" with a trickle-down telling the application to
// go on. The daemon's flags (database, --variety, --mod, --extend-deadline,
// --one-pass, ...) are the stock trickle handler's, without --handler-cmd;
// --progress-dir is its own.
//
//	go run ./trickle --config project.yaml --progress-dir progress
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/taskserver/taskserver/job"
	"github.com/taskserver/taskserver/trickle"
)

func main() { trickle.Main(program()) }

// program is the daemon: the stock trickle handler with the progress
// recorder.
func program() trickle.Program {
	return trickle.Program{
		Usage: "record each task's latest reported progress in <progress-dir>/<task>; answer \"ask\" messages",
		Flags: []job.Flag{{Name: "progress-dir", Value: "progress",
			Usage: "directory of the per-task progress files (relative to --project-dir)"}},
		NewHandler: func(env job.Env) (trickle.Handler, error) {
			if env.Flags["progress-dir"] == "" {
				return nil, errors.New("--progress-dir is empty")
			}
			return ProgressHandler{Dir: env.Path(env.Flags["progress-dir"])}, nil
		},
	}
}

// ProgressHandler records progress. It is idempotent, as a Handler must
// be: handling a message again writes the same file again.
type ProgressHandler struct{ Dir string }

// Handle records m's progress, if it reports any, and answers an "ask".
func (h ProgressHandler) Handle(_ context.Context, m trickle.Message) ([]trickle.Reply, error) {
	if m.ResultName == "" || strings.ContainsAny(m.ResultName, `/\`) || strings.HasPrefix(m.ResultName, ".") {
		// Not a task name this server makes: nothing to record, and
		// retrying will not change it.
		return nil, nil
	}
	if frac, ok := element(m.XML, "fraction_done"); ok {
		f, err := strconv.ParseFloat(frac, 64)
		if err != nil || f < 0 || f > 1 {
			return nil, nil // a malformed report: nothing to record
		}
		if err := writeFile(filepath.Join(h.Dir, m.ResultName), fmt.Sprintf("%g\n", f)); err != nil {
			return nil, err
		}
	}
	if m.Variety == "ask" {
		return []trickle.Reply{{Variety: "answer", Body: "<go_on/>"}}, nil
	}
	return nil, nil
}

// element returns the text of the first <name> element in xml.
func element(xml, name string) (string, bool) {
	_, rest, ok := strings.Cut(xml, "<"+name+">")
	if !ok {
		return "", false
	}
	text, _, ok := strings.Cut(rest, "</"+name+">")
	return strings.TrimSpace(text), ok
}

// writeFile replaces path with body whole: a reader never sees half of it.
func writeFile(path, body string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
