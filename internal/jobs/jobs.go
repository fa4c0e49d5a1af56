package jobs

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/store"
)

// InputOpenName is the name under which the application opens a job's input
// file (BOINC's <open_name>).
const InputOpenName = "in"

// ErrJobExists is returned when a job of that name is already in the
// database.
var ErrJobExists = errors.New("job already exists")

// Store is what job creation needs from the database.
type Store interface {
	WorkunitInsertBatch(ctx context.Context, wus []store.Workunit) error
	WorkunitGetByName(ctx context.Context, name string) (store.Workunit, error)
}

// Job is one job to create: its name and the content of its input file.
type Job struct {
	Name  string
	Input []byte
}

// Creator stages input files and inserts jobs.
type Creator struct {
	st          Store
	downloadDir string
	fanout      int
	now         func() time.Time
}

// NewCreator returns a Creator staging files under downloadDir with the
// project's fan-out. now is the clock (time.Now in production).
func NewCreator(st Store, downloadDir string, fan int, now func() time.Time) *Creator {
	if now == nil {
		now = time.Now
	}
	return &Creator{st: st, downloadDir: downloadDir, fanout: fan, now: now}
}

// InputName is the name of job's input file in the download directory.
func InputName(job string) string { return job + "_in" }

// NewName returns a fresh job name "<prefix>_<unix time>_<16 random hex>":
// unique without asking the database, and never reused, so a file left by a
// crashed batch can never be mistaken for a later job's.
func NewName(prefix string, now time.Time) string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return prefix + "_" + strconv.FormatInt(now.Unix(), 10) + "_" + hex.EncodeToString(b[:])
}

// Create stages the input file of every job and then inserts all their
// workunits in one transaction, with transition_time = now so the
// transitioner creates their instances. On error no job of the batch is in
// the database (files may be left; see the package comment).
func (c *Creator) Create(ctx context.Context, appID int64, batch []Job, p Params) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("job parameters: %w", err)
	}
	if len(batch) == 0 {
		return nil
	}
	now := c.now().Unix()
	wus := make([]store.Workunit, 0, len(batch))
	// The root is synced too, in case staging created a sub-directory.
	dirs := map[string]bool{c.downloadDir: true}
	for _, j := range batch {
		if len(j.Name) > 254 {
			return fmt.Errorf("job name %q: longer than 254 bytes", j.Name)
		}
		in := jobxml.InputFile{Name: InputName(j.Name), OpenName: InputOpenName,
			Nbytes: float64(len(j.Input)), MD5: md5Hex(j.Input)}
		doc, err := jobxml.FormatWorkunit(jobxml.Workunit{Inputs: []jobxml.InputFile{in}})
		if err != nil {
			return fmt.Errorf("job %q: %w", j.Name, err)
		}
		dir, err := stage(c.downloadDir, c.fanout, in.Name, j.Input)
		if err != nil {
			return fmt.Errorf("job %q: %w", j.Name, err)
		}
		dirs[dir] = true
		wus = append(wus, store.Workunit{
			CreateTime:        now,
			AppID:             appID,
			Name:              j.Name,
			XMLDoc:            doc,
			RscFpopsEst:       p.RscFpopsEst,
			RscFpopsBound:     p.FpopsBound(),
			RscMemoryBound:    p.RscMemoryBound,
			RscDiskBound:      p.RscDiskBound,
			TransitionTime:    now,
			DelayBound:        int64(p.DelayBound / time.Second),
			MinQuorum:         p.MinQuorum,
			TargetNResults:    p.TargetNResults,
			MaxErrorResults:   p.MaxErrorResults,
			MaxTotalResults:   p.MaxTotalResults,
			MaxSuccessResults: p.MaxSuccessResults,
			Priority:          p.Priority,
			ModTime:           now,
		})
	}
	// The renames are durable only once their directories are synced; a
	// row must never outlive its file in a crash.
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	if err := c.st.WorkunitInsertBatch(ctx, wus); err != nil {
		return err
	}
	return nil
}

// Submit creates one job named name after checking that no job of that name
// exists: without the check, staging would replace the input file of the
// existing job before the insert failed on the unique name.
func (c *Creator) Submit(ctx context.Context, appID int64, job Job, p Params) error {
	_, err := c.st.WorkunitGetByName(ctx, job.Name)
	switch {
	case err == nil:
		return fmt.Errorf("job %q: %w", job.Name, ErrJobExists)
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	return c.Create(ctx, appID, []Job{job}, p)
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// stage writes data as file name under root (in its fan-out sub-directory)
// through a synced temporary file and a rename, so the file is either whole
// or absent. It returns the directory, which the caller syncs.
func stage(root string, fan int, name string, data []byte) (string, error) {
	path, err := fanout.Path(root, name, fan)
	if err != nil {
		return "", fmt.Errorf("input file: %w", err)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create input directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return "", fmt.Errorf("stage input file: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("stage input file %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	// CreateTemp makes the file 0600; the data server and web server must
	// be able to read it.
	if err := f.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("stage input file %s: %w", name, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("stage input file %s: %w", name, err)
	}
	return dir, nil
}

// syncDir makes the entries of dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}
