package batch

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/state"
)

// ErrNoResultsDir means Outputs was asked for without a results directory.
var ErrNoResultsDir = errors.New("no results directory configured")

// OutputFile is one file of a batch's outputs in the results directory.
type OutputFile struct {
	// Job is the job's name; Name the file's path in the results
	// directory, with slashes: "<job>/<open name>" for an output (its
	// logical name), "<job>.error" for a failed job.
	Job, Name string
	// Logical is the output's name in the job's output template (its open
	// name: what the application wrote); empty for the .error file.
	Logical string
	Path    string
	Size    int64
}

// outputPage is the number of jobs read per query while listing outputs.
const outputPage = 500

// errorSuffix ends the file the assimilator writes for a failed job (the
// file handler's ErrorSuffix).
const errorSuffix = ".error"

// Outputs lists the files of batch b's assimilated jobs in the results
// directory (the assimilator's copy handler's layout), by job id: the files
// of the directory <job>, each an output under its logical name, in name
// order, and <job>.error. Jobs not yet assimilated have none.
func (s *Service) Outputs(ctx context.Context, b row.Batch) ([]OutputFile, error) {
	if s.resultsDir == "" {
		return nil, ErrNoResultsDir
	}
	var out []OutputFile
	after := int64(0)
	for {
		wus, err := s.st.WorkunitListByBatch(ctx, b.ID, after, outputPage)
		if err != nil {
			return nil, err
		}
		for _, wu := range wus {
			if wu.AssimilateState != state.AssimilateDone {
				continue
			}
			files, err := s.jobOutputs(wu.Name)
			if err != nil {
				return nil, err
			}
			out = append(out, files...)
		}
		if len(wus) < outputPage {
			return out, nil
		}
		after = wus[len(wus)-1].ID
	}
}

// JobOutputs lists the files of job wu in the results directory by their
// logical names (the open names of the job's output template, in order):
// every output of an assimilated job, or its .error file if it failed. A
// job not yet assimilated has none.
func (s *Service) JobOutputs(ctx context.Context, wu row.Workunit) ([]OutputFile, error) {
	if s.resultsDir == "" {
		return nil, ErrNoResultsDir
	}
	if wu.AssimilateState != state.AssimilateDone {
		return nil, nil
	}
	return s.jobOutputs(wu.Name)
}

// jobOutputs lists job's files in the results directory: <job>/<open name>
// for each output delivered, in name order, and <job>.error.
func (s *Service) jobOutputs(job string) ([]OutputFile, error) {
	var out []OutputFile
	add := func(name string) error {
		path := filepath.Join(s.resultsDir, filepath.FromSlash(name))
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("output of job %s: %w", job, err)
		}
		if fi.Mode().IsRegular() {
			logical := ""
			if rest, ok := strings.CutPrefix(name, job+"/"); ok {
				logical = rest
			}
			out = append(out, OutputFile{Job: job, Name: name, Logical: logical, Path: path, Size: fi.Size()})
		}
		return nil
	}
	entries, err := os.ReadDir(filepath.Join(s.resultsDir, job))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("outputs of job %s: %w", job, err)
	}
	for _, e := range entries { // sorted by name
		if err := add(job + "/" + e.Name()); err != nil {
			return nil, err
		}
	}
	if err := add(job + errorSuffix); err != nil {
		return nil, err
	}
	return out, nil
}

// WriteTarGz writes batch b's outputs to w as a gzip-compressed tar, each
// file as "<batch name>/<file name>", and returns how many files it wrote.
// On error the archive is left unfinished, so a reader notices.
func (s *Service) WriteTarGz(ctx context.Context, b row.Batch, w io.Writer) (int, error) {
	files, err := s.Outputs(ctx, b)
	if err != nil {
		return 0, err
	}
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return i, err
		}
		if err := addTar(tw, b.Name+"/"+f.Name, f.Path); err != nil {
			return i, err
		}
	}
	if err := tw.Close(); err != nil {
		return len(files), fmt.Errorf("finish tar: %w", err)
	}
	if err := gz.Close(); err != nil {
		return len(files), fmt.Errorf("finish gzip: %w", err)
	}
	return len(files), nil
}

func addTar(tw *tar.Writer, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: fi.Size(), ModTime: fi.ModTime(),
		Format: tar.FormatPAX}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	// The header fixed the size: a file that grew is cut, one that shrank
	// fails, and neither corrupts the archive silently.
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		return fmt.Errorf("output %s: %w", name, err)
	}
	return nil
}

// CopyOutputs copies batch b's outputs into directory dest (created if
// missing) under their own names (<job>/<open name>, <job>.error), and
// returns how many files it copied. Each
// file is written to a temporary name and renamed, so dest never holds part
// of one.
func (s *Service) CopyOutputs(ctx context.Context, b row.Batch, dest string) (int, error) {
	files, err := s.Outputs(ctx, b)
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return 0, fmt.Errorf("create %s: %w", dest, err)
	}
	for i, f := range files {
		if err := ctx.Err(); err != nil {
			return i, err
		}
		if err := copyFile(f.Path, dest, f.Name); err != nil {
			return i, err
		}
	}
	return len(files), nil
}

func copyFile(src, dest, name string) error {
	dir := filepath.Join(dest, filepath.FromSlash(path.Dir(name)))
	name = path.Base(name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("copy %s: %w", name, err)
	}
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("copy %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("copy %s: %w", name, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("copy %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("copy %s: %w", name, err)
	}
	return nil
}
