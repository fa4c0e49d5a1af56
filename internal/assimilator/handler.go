package assimilator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/taskserver/taskserver/internal/durable"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/outputfile"
	"github.com/taskserver/taskserver/internal/plugin"
	"github.com/taskserver/taskserver/internal/row"
)

// Handler hands one finished job to the project. canonical is the job's
// canonical instance, nil for a job that failed (wu.ErrorMask says why). It
// must be idempotent: after a crash it is called again for the same job. An
// error leaves the job READY, to be handled again after a back-off; an error
// wrapping context.DeadlineExceeded counts as a timeout. Handle is called
// from one goroutine at a time, and never for a known-answer job.
type Handler interface {
	Handle(ctx context.Context, wu row.Workunit, canonical *row.Result) error
}

// Flusher is a Handler that makes its work durable a page of jobs at a
// time rather than job by job, because one sync per page costs what one
// sync per job would (a journal commit). The service calls Flush after the
// handler has run for a page of jobs and before it marks any of them
// assimilated; until Flush returns nil, what Handle did for those jobs may
// be lost in a crash, or (for FileHandler) not be visible yet. A Flush
// error fails every job handled since the last Flush: they stay READY and
// are handled again after their back-off. Flush is called from the
// goroutine that calls Handle.
type Flusher interface {
	Flush(ctx context.Context) error
}

// ErrorSuffix ends the name of the file that records a failed job.
const ErrorSuffix = ".error"

// tmpSuffix ends the temporary name of a file on its way to its final
// name. Job names may not hold '%' (fanout.ValidName), so no final name
// ends with it, and a job's temporary name is fixed: one left over from a
// crash is overwritten when the job is handled again.
const tmpSuffix = "%tmp"

// FileHandler stores each job's outcome as files in a results directory:
// the directory <Dir>/<job name> holds every output file of the canonical
// instance under its logical name (its open name, such as
// <Dir>/<job name>/out), an optional output the instance does not have
// left out (see plugin.Canonical); a failed job gets <Dir>/<job name>.error
// holding the names of its error bits.
//
// An output file is handed over by a hard link to the uploaded file when
// the upload and results directories are on one file system: no file is
// created and no bytes are copied. Only a finished upload is handed over
// (package outputfile: no upload writes to it again, whoever holds its
// certificate; an unfinished one fails the job's handling), and the file
// deleter only unlinks its name in the upload directory, so the results
// entry keeps the data. Where linking
// fails (another file system, fs.protected_hardlinks against a file of
// another owner, ...), the file is copied to a temporary name instead, as
// the error files are written. Flush then makes the page durable at once:
// the data of every linked and written file (each file synced, several at
// once so they share journal commits; linked data is durable whoever wrote
// the upload and whether or not it synced), then each written file renamed to its final name, then the
// jobs' directories and the results directory synced. A name in the results directory always holds a
// whole file, and a crash before Flush returns loses nothing the database
// says is assimilated.
//
// Use a *FileHandler; its zero state is ready, and it must not be copied
// once used.
type FileHandler struct {
	// Dir is the results directory, created if missing.
	Dir string
	// UploadDir and Fanout locate output files (see package fanout).
	UploadDir string
	Fanout    int

	// link is os.Link; tests replace it to force the copy.
	link func(oldname, newname string) error

	mu sync.Mutex
	// ready says Dir was seen to exist since the last Flush.
	ready bool
	// made says this handler created Dir since the last Flush, so its
	// parent's entry must be synced too.
	made bool
	// jobDirs are the jobs' directories filled since the last Flush, whose
	// entries Flush syncs.
	jobDirs map[string]bool
	// linked are the files linked into Dir since the last Flush.
	linked []string
	// pending are the files written under temporary names, to be renamed
	// by Flush; queued holds their temporary names. A name is queued once
	// even if its job is handled again before a Flush (when a wrapping
	// handler skipped one): the second write replaced the first.
	pending []pendingFile
	queued  map[string]bool
}

// pendingFile is a file whose data was written to tmp, waiting to become
// final.
type pendingFile struct {
	tmp, final string
}

// Handle hands over the job's result files: linked, or written for Flush
// to finish.
func (h *FileHandler) Handle(_ context.Context, wu row.Workunit, canonical *row.Result) error {
	if err := fanout.ValidName(wu.Name); err != nil {
		return fmt.Errorf("job name: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.prepareDir(); err != nil {
		return err
	}
	// On failure the job's files written so far are dropped: it is handled
	// again from the start.
	queued := len(h.pending)
	err := h.handle(wu, canonical)
	if err != nil {
		h.drop(queued)
	}
	return err
}

func (h *FileHandler) handle(wu row.Workunit, canonical *row.Result) error {
	if canonical == nil {
		return h.write(wu.Name+ErrorSuffix, strings.NewReader(wu.ErrorMask.String()+"\n"))
	}
	in, err := plugin.Canonical(*canonical, h.UploadDir, h.Fanout)
	if err != nil {
		return err
	}
	dir := filepath.Join(h.Dir, wu.Name)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("results of job %s: %w", wu.Name, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("results of job %s: %s is not a directory (%v)", wu.Name, dir, err)
	}
	if h.jobDirs == nil {
		h.jobDirs = map[string]bool{}
	}
	h.jobDirs[dir] = true
	for _, o := range in.Outputs {
		if err := h.place(o.Path, filepath.Join(wu.Name, o.Name)); err != nil {
			return fmt.Errorf("canonical result %d output %s: %w", canonical.ID, o.Name, err)
		}
	}
	return nil
}

// prepareDir makes sure Dir exists, once per Flush.
func (h *FileHandler) prepareDir() error {
	if h.ready {
		return nil
	}
	if _, err := os.Stat(h.Dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(h.Dir, 0o755); err != nil {
			return fmt.Errorf("create results directory: %w", err)
		}
		h.made = true
	} else if err != nil {
		return fmt.Errorf("results directory: %w", err)
	}
	h.ready = true
	return nil
}

// place makes Dir/name the file at src: a hard link when it can, else a
// copy finished by Flush. Only a finished output is placed (package
// outputfile): no upload writes to it again, so neither the link nor the
// copy can differ from what was validated, and a later upload with the
// same certificate changes nothing published. The link must end up on
// the very file checked, so it is compared after linking.
func (h *FileHandler) place(src, name string) error {
	in, checked, err := openFinished(src)
	if err != nil {
		// A missing file included: the job waits for a retry rather than
		// hand over a partial set.
		return err
	}
	defer in.Close()
	final := filepath.Join(h.Dir, name)
	link := h.link
	if link == nil {
		link = os.Link
	}
	err = link(src, final)
	switch {
	case err == nil:
		if err := sameFile(final, checked); err != nil {
			os.Remove(final)
			return err
		}
		h.linked = append(h.linked, final)
		return nil
	case errors.Is(err, fs.ErrExist):
		return h.replace(src, final, checked, in, link)
	case errors.Is(err, fs.ErrNotExist):
		return err
	}
	return h.write(name, in)
}

// openFinished opens the output at src and checks that it is finished.
func openFinished(src string) (*os.File, fs.FileInfo, error) {
	in, err := os.Open(src)
	if err != nil {
		return nil, nil, err
	}
	fi, err := in.Stat()
	if err != nil {
		in.Close()
		return nil, nil, err
	}
	if !outputfile.Finished(fi.Mode()) {
		in.Close()
		return nil, nil, fmt.Errorf("%s is not a finished upload (mode %v): an upload could still change it", src, fi.Mode())
	}
	return in, fi, nil
}

// sameFile checks that path is the file checked: the upload was not
// replaced between the check and the link.
func sameFile(path string, checked fs.FileInfo) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if !os.SameFile(fi, checked) {
		return fmt.Errorf("%s changed while it was being linked", path)
	}
	return nil
}

// replace handles a name already taken: by the same file (the job was
// handled before a crash, or its Flush failed) it is done; otherwise the
// file is linked under the temporary name and renamed over it. Flush makes
// either durable. in is the checked file open, for the copy.
func (h *FileHandler) replace(src, final string, checked fs.FileInfo, in *os.File, link func(string, string) error) error {
	if fi, err := os.Lstat(final); err == nil && os.SameFile(checked, fi) {
		h.linked = append(h.linked, final) // it may not be durable yet
		return nil
	}
	tmp := final + tmpSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := link(src, tmp); err != nil {
		// Linked once but not now; copying is always possible.
		return h.write(filepath.Base(final), in)
	}
	if err := sameFile(tmp, checked); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return err
	}
	h.linked = append(h.linked, final)
	return nil
}

// write stores what src gives under Dir/name's temporary name, unsynced;
// Flush syncs it and renames it to name.
func (h *FileHandler) write(name string, src io.Reader) error {
	final := filepath.Join(h.Dir, name)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	fail := func(err error) error {
		f.Close()
		h.unqueue(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if _, err := io.Copy(f, src); err != nil {
		return fail(err)
	}
	// The umask may have narrowed the mode; whoever reads the results
	// (another user, a web server) must be able to.
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		h.unqueue(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	if !h.queued[tmp] {
		if h.queued == nil {
			h.queued = map[string]bool{}
		}
		h.queued[tmp] = true
		h.pending = append(h.pending, pendingFile{tmp: tmp, final: final})
	}
	return nil
}

// unqueue removes the temporary file tmp, and its entry if it was queued.
func (h *FileHandler) unqueue(tmp string) {
	os.Remove(tmp)
	if !h.queued[tmp] {
		return
	}
	delete(h.queued, tmp)
	h.pending = slices.DeleteFunc(h.pending, func(p pendingFile) bool { return p.tmp == tmp })
}

// drop removes the temporary files queued from index from on.
func (h *FileHandler) drop(from int) {
	for _, p := range h.pending[from:] {
		os.Remove(p.tmp)
		delete(h.queued, p.tmp)
	}
	h.pending = h.pending[:from]
}

// Flush makes every job handled since the last Flush durable: the linked
// and written files' data synced, each written file renamed to its final
// name, then the jobs' directories and the results directory synced (and its parent, if the handler
// created it). On error the written files are removed; those jobs are
// handled again.
func (h *FileHandler) Flush(context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	// The next page checks Dir again, in case it was removed meanwhile.
	h.ready = false
	if len(h.linked) == 0 && len(h.pending) == 0 && len(h.jobDirs) == 0 && !h.made {
		return nil
	}
	// The jobs of a failed Flush are handled again, and link again.
	linked := h.linked
	h.linked = nil
	if err := h.finish(linked); err != nil {
		h.drop(0)
		return err
	}
	for dir := range h.jobDirs {
		if err := durable.Dir(dir); err != nil {
			return fmt.Errorf("results: %w", err)
		}
	}
	h.jobDirs = nil
	if err := durable.Dir(h.Dir); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if h.made {
		if err := durable.Dir(filepath.Dir(h.Dir)); err != nil {
			return fmt.Errorf("results: %w", err)
		}
		h.made = false
	}
	return nil
}

// finish syncs the data of the linked and pending files and renames the
// pending ones to their final names: written data is durable before any
// final name refers to it.
func (h *FileHandler) finish(linked []string) error {
	paths := linked
	for _, p := range h.pending {
		paths = append(paths, p.tmp)
	}
	if err := durable.Files(paths); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	for len(h.pending) > 0 {
		p := h.pending[0]
		if err := os.Rename(p.tmp, p.final); err != nil {
			return fmt.Errorf("results: %w", err)
		}
		h.pending = h.pending[1:]
		delete(h.queued, p.tmp)
	}
	h.pending = nil
	return nil
}
