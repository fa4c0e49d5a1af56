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

	"github.com/taskserver/taskserver/internal/durable"
)

// archive is one growing series of archive files for one table
// (wu_archive_<unix>_<seq>.xml.gz, ...). Each write adds whole gzip members
// to the current file; sync makes everything written durable.
type archive struct {
	dir     string
	prefix  string // "wu_archive" or "result_archive"
	maxRows int
	now     func() time.Time

	f       *os.File
	rows    int   // rows in f
	size    int64 // bytes in f
	seq     int   // next sequence number to try
	created bool  // a file was created since the last sync

	// Reused from member to member, so a pass allocates for one record
	// and one compressed member, never for a whole batch.
	zw       *gzip.Writer
	rec, out bytes.Buffer
}

// write appends n records, the i-th encoded by enc, filling the current
// file up to maxRows and starting new files as needed. The records are
// durable only after sync. It returns the compressed bytes written.
func (a *archive) write(n int, enc func(buf *bytes.Buffer, i int)) (int64, error) {
	var written int64
	for i := 0; i < n; {
		if a.f != nil && a.rows >= a.maxRows {
			// A full file is closed, and so synced, here.
			if err := a.close(); err != nil {
				return written, err
			}
		}
		if a.f == nil {
			if err := a.open(); err != nil {
				return written, err
			}
			a.created = true
		}
		k := min(n-i, a.maxRows-a.rows)
		w, err := a.writeMember(i, i+k, enc)
		written += w
		if err != nil {
			return written, err
		}
		i += k
	}
	return written, nil
}

// sync makes every record written so far durable: the current file's
// data, and the directory entry of any file created since the last sync.
func (a *archive) sync() error {
	if a.f != nil {
		if err := a.f.Sync(); err != nil {
			return a.fail(fmt.Errorf("sync archive: %w", err))
		}
	}
	if a.created {
		if err := durable.Dir(a.dir); err != nil {
			return err
		}
		a.created = false
	}
	return nil
}

// writeMember appends records from to to-1 as one gzip member. On failure
// it cuts the file back to its previous size, so the file never holds a
// torn member while the process lives.
func (a *archive) writeMember(from, to int, enc func(buf *bytes.Buffer, i int)) (int64, error) {
	a.out.Reset()
	if a.zw == nil {
		// The fastest level: the archive is written once and rarely read,
		// and at the default level compressing cost db_purge more CPU than
		// all the rest of its work.
		a.zw, _ = gzip.NewWriterLevel(&a.out, gzip.BestSpeed) // a valid level does not fail
	} else {
		a.zw.Reset(&a.out)
	}
	for i := from; i < to; i++ {
		a.rec.Reset()
		enc(&a.rec, i)
		_, _ = a.zw.Write(a.rec.Bytes()) // writes to a bytes.Buffer do not fail
	}
	_ = a.zw.Close()
	n, err := a.f.Write(a.out.Bytes())
	if err != nil {
		if terr := a.f.Truncate(a.size); terr != nil {
			return 0, a.fail(fmt.Errorf("write archive: %w (and truncating it back: %v)", err, terr))
		}
		return 0, fmt.Errorf("write archive %s: %w", a.f.Name(), err)
	}
	a.size += int64(n)
	a.rows += to - from
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
