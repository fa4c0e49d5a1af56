package dbpurge

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// archive is one growing series of archive files for one table
// (wu_archive_<unix>_<seq>.xml.gz, ...). Each append adds whole gzip members
// to the current file and fsyncs it before returning.
type archive struct {
	dir     string
	prefix  string // "wu_archive" or "result_archive"
	maxRows int
	now     func() time.Time

	f    *os.File
	rows int   // rows in f
	size int64 // bytes in f
	seq  int   // next sequence number to try
}

// appendRecords archives records (each one encoded row), filling the
// current file up to maxRows and starting new files as needed. When it
// returns nil every record is durably on disk. It returns the compressed
// bytes written.
func (a *archive) appendRecords(records [][]byte) (int64, error) {
	var written int64
	newFile := false
	for len(records) > 0 {
		if a.f != nil && a.rows >= a.maxRows {
			if err := a.close(); err != nil {
				return written, err
			}
		}
		if a.f == nil {
			if err := a.open(); err != nil {
				return written, err
			}
			newFile = true
		}
		k := min(len(records), a.maxRows-a.rows)
		n, err := a.writeMember(records[:k])
		written += n
		if err != nil {
			return written, err
		}
		records = records[k:]
		// A file filled here is closed, and so synced, by the next round;
		// the last one is synced below.
	}
	if a.f != nil {
		if err := a.f.Sync(); err != nil {
			return written, a.fail(fmt.Errorf("sync archive: %w", err))
		}
	}
	if newFile {
		if err := syncDir(a.dir); err != nil {
			return written, err
		}
	}
	return written, nil
}

// writeMember appends records as one gzip member. On failure it cuts the
// file back to its previous size, so the file never holds a torn member
// while the process lives.
func (a *archive) writeMember(records [][]byte) (int64, error) {
	var buf bytes.Buffer
	// The fastest level: the archive is written once and rarely read, and
	// at the default level compressing cost db_purge more CPU than all the
	// rest of its work.
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed) // a valid level does not fail
	for _, r := range records {
		_, _ = zw.Write(r) // writes to a bytes.Buffer do not fail
	}
	_ = zw.Close()
	n, err := a.f.Write(buf.Bytes())
	if err != nil {
		if terr := a.f.Truncate(a.size); terr != nil {
			return 0, a.fail(fmt.Errorf("write archive: %w (and truncating it back: %v)", err, terr))
		}
		return 0, fmt.Errorf("write archive %s: %w", a.f.Name(), err)
	}
	a.size += int64(n)
	a.rows += len(records)
	return int64(n), nil
}

// open creates the next file; O_EXCL and a rising sequence number keep two
// processes (or two starts in one second) from sharing one.
func (a *archive) open() error {
	unix := strconv.FormatInt(a.now().Unix(), 10)
	for {
		name := filepath.Join(a.dir, a.prefix+"_"+unix+"_"+strconv.Itoa(a.seq)+".xml.gz")
		a.seq++
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("create archive file: %w", err)
		}
		a.f, a.rows, a.size = f, 0, 0
		return nil
	}
}

// close syncs and closes the current file.
func (a *archive) close() error {
	if a.f == nil {
		return nil
	}
	f := a.f
	a.f = nil
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("close archive %s: %w", f.Name(), err)
	}
	return nil
}

// fail drops the current file after an error that may have left it in an
// unknown state; the next append starts a new one.
func (a *archive) fail(err error) error {
	if a.f != nil {
		a.f.Close()
		a.f = nil
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync archive directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync archive directory %s: %w", dir, err)
	}
	return nil
}
