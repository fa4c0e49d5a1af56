package statsexport

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/taskserver/taskserver/internal/durable"
	"github.com/taskserver/taskserver/internal/row"
)

// Source is what an export reads: the users, teams and hosts to write, a
// batch at a time after a cursor, by id, and the apps tables.xml lists.
type Source interface {
	AppList(ctx context.Context) ([]row.App, error)
	StatsHostList(ctx context.Context, afterID int64, limit int) ([]row.StatsHost, error)
	StatsTeamList(ctx context.Context, afterID int64, limit int) ([]row.StatsTeam, error)
	StatsUserList(ctx context.Context, afterID int64, limit int) ([]row.StatsUser, error)
}

// Result is what one export wrote.
type Result struct {
	Totals
	// Bytes is the size of the dump's files on disk.
	Bytes int64
}

// Export writes a complete dump of src into dir, reading batch rows per
// query, and returns what it wrote. now is the dump's update_time.
//
// The dump is written into a new directory beside dir and swapped in whole
// only once every file is written and synced: a reader of dir sees the
// previous dump or the new one, never a mix or a part, and an export that
// fails (or a process killed) at any point leaves the previous dump as it
// was. The previous dump is then deleted. One export runs at a time per
// dir (a lock file beside it); a second is refused with an error.
func Export(ctx context.Context, src Source, dir string, batch int, now time.Time) (Result, error) {
	if batch < 1 {
		return Result{}, fmt.Errorf("statistics export: batch %d: want at least 1", batch)
	}
	dir = filepath.Clean(dir)
	parent, base := filepath.Split(dir)
	if parent == "" {
		parent = "."
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Result{}, fmt.Errorf("statistics export: create %s: %w", parent, err)
	}
	unlock, err := lock(filepath.Join(parent, "."+base+".lock"))
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	// Under the lock, a directory left by an export that died (or by one
	// that died between the swap and deleting the previous dump) is no
	// one's.
	pattern := filepath.Join(parent, "."+base+".new-*")
	stale, _ := filepath.Glob(pattern)
	for _, d := range stale {
		if err := os.RemoveAll(d); err != nil {
			return Result{}, fmt.Errorf("statistics export: remove the partial dump %s: %w", d, err)
		}
	}
	tmp, err := os.MkdirTemp(parent, "."+base+".new-")
	if err != nil {
		return Result{}, fmt.Errorf("statistics export: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	// MkdirTemp makes the directory private; the web server serves it.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return Result{}, fmt.Errorf("statistics export: %w", err)
	}
	res, err := writeDump(ctx, src, tmp, batch, now)
	if err != nil {
		return Result{}, err
	}
	if err := durable.Dir(tmp); err != nil {
		return Result{}, fmt.Errorf("statistics export: %w", err)
	}
	if err := swap(tmp, dir); err != nil {
		return Result{}, err
	}
	if err := durable.Dir(parent); err != nil {
		return Result{}, fmt.Errorf("statistics export: %w", err)
	}
	done = true
	// tmp now holds the previous dump, if there was one. Failing to
	// delete it leaves a directory the next export deletes: the new
	// dump is in place, so the export succeeded.
	_ = os.RemoveAll(tmp)
	return res, nil
}

// writeDump writes every file of a dump into dir.
func writeDump(ctx context.Context, src Source, dir string, batch int, now time.Time) (Result, error) {
	res := Result{Totals: Totals{UpdateTime: now.Unix()}}
	var err error
	var n int64
	users, err := newGzFile(filepath.Join(dir, "user.gz"), "users")
	if err == nil {
		err = dumpTable(ctx, users, src.StatsUserList, batch, func(u row.StatsUser) int64 { return u.ID },
			func(b []byte, u row.StatsUser) []byte {
				res.Users++
				res.TotalCredit += u.TotalCredit
				return appendUser(b, u)
			})
		n, err = users.finish(err)
		res.Bytes += n
	}
	if err != nil {
		return res, err
	}
	teams, err := newGzFile(filepath.Join(dir, "team.gz"), "teams")
	if err == nil {
		err = dumpTable(ctx, teams, src.StatsTeamList, batch, func(t row.StatsTeam) int64 { return t.ID },
			func(b []byte, t row.StatsTeam) []byte {
				res.Teams++
				return appendTeam(b, t)
			})
		n, err = teams.finish(err)
		res.Bytes += n
	}
	if err != nil {
		return res, err
	}
	hosts, err := newGzFile(filepath.Join(dir, "host.gz"), "hosts")
	if err == nil {
		err = dumpTable(ctx, hosts, src.StatsHostList, batch, func(h row.StatsHost) int64 { return h.ID },
			func(b []byte, h row.StatsHost) []byte {
				res.Hosts++
				return appendHost(b, h)
			})
		n, err = hosts.finish(err)
		res.Bytes += n
	}
	if err != nil {
		return res, err
	}
	// BOINC's default export lists the accounts and hosts deleted at
	// their owners' request, so that statistics sites drop them too.
	// This server deletes neither, so the lists are empty; the files are
	// written because the sites fetch them.
	for _, f := range []struct{ name, tag string }{{"user_deleted.gz", "users_deleted"}, {"host_deleted.gz", "hosts_deleted"}} {
		z, err := newGzFile(filepath.Join(dir, f.name), f.tag)
		if err != nil {
			return res, err
		}
		n, err := z.finish(nil)
		res.Bytes += n
		if err != nil {
			return res, err
		}
	}
	apps, err := src.AppList(ctx)
	if err != nil {
		return res, fmt.Errorf("statistics export: %w", err)
	}
	tables := appendTables(nil, res.Totals, apps)
	if err := writeFileSync(filepath.Join(dir, TablesFile), tables); err != nil {
		return res, err
	}
	res.Bytes += int64(len(tables))
	return res, nil
}

// TablesFile is the dump's summary file, whose update_time says when the
// dump was made.
const TablesFile = "tables.xml"

// dumpTable writes every row list returns to z, a batch at a time, each
// record made by put; id is a row's id, the cursor of the next batch. The
// next batch is read while the current one is encoded and compressed, so
// the database and the compressor work side by side.
func dumpTable[R any](ctx context.Context, z *gzFile, list func(context.Context, int64, int) ([]R, error), batch int,
	id func(R) int64, put func([]byte, R) []byte) error {
	type page struct {
		rows []R
		err  error
	}
	next := make(chan page, 1)
	fetch := func(after int64) {
		go func() {
			rows, err := list(ctx, after, batch)
			next <- page{rows, err}
		}()
	}
	fetch(0)
	var buf []byte
	for {
		p := <-next
		if p.err != nil {
			return fmt.Errorf("statistics export: %w", p.err)
		}
		more := len(p.rows) == batch
		if more {
			fetch(id(p.rows[len(p.rows)-1]))
		}
		buf = buf[:0]
		for _, r := range p.rows {
			buf = put(buf, r)
		}
		if err := z.write(buf); err != nil {
			if more {
				<-next // the read in flight ends before the export does
			}
			return err
		}
		if !more {
			return nil
		}
	}
}

// gzFile is one gzip'd file of the dump, opened with BOINC's XML header
// and wrapper element.
type gzFile struct {
	path string
	f    *os.File
	bw   *bufio.Writer
	gz   *gzip.Writer
	tag  string
}

func newGzFile(path, tag string) (*gzFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("statistics export: %w", err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	z := &gzFile{path: path, f: f, bw: bw, gz: gzip.NewWriter(bw), tag: tag}
	if err := z.write([]byte(header + "<" + tag + ">\n")); err != nil {
		_ = f.Close()
		return nil, err
	}
	return z, nil
}

func (z *gzFile) write(b []byte) error {
	if _, err := z.gz.Write(b); err != nil {
		return fmt.Errorf("statistics export: write %s: %w", z.path, err)
	}
	return nil
}

// finish closes the wrapper element and the file, synced, and returns its
// size; when err (the writing's outcome) is not nil it only closes the
// file and returns err.
func (z *gzFile) finish(err error) (int64, error) {
	if err != nil {
		_ = z.f.Close()
		return 0, err
	}
	err = z.write([]byte("</" + z.tag + ">\n"))
	if err == nil {
		err = z.gz.Close()
	}
	if err == nil {
		err = z.bw.Flush()
	}
	if err == nil {
		err = z.f.Sync()
	}
	var size int64
	if err == nil {
		var st os.FileInfo
		if st, err = z.f.Stat(); err == nil {
			size = st.Size()
		}
	}
	err = errors.Join(err, z.f.Close())
	if err != nil {
		return 0, fmt.Errorf("statistics export: finish %s: %w", z.path, err)
	}
	return size, nil
}

// writeFileSync writes a new file and syncs it.
func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("statistics export: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("statistics export: write %s: %w", path, err)
	}
	return nil
}

// swap puts the complete dump in tmp in dir's place. With a previous dump
// there, the two directories are exchanged in one rename (Linux's
// RENAME_EXCHANGE), so dir is never missing, not even for an instant, and
// tmp is left holding the previous dump; with none, tmp is renamed to dir.
func swap(tmp, dir string) error {
	err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, dir, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.ENOENT) {
		err = os.Rename(tmp, dir)
	}
	if errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("statistics export: replace %s: its filesystem cannot exchange two directories in one rename "+
			"(renameat2 RENAME_EXCHANGE; ext4, xfs, btrfs and tmpfs can): put the dump on one that can: %w", dir, err)
	}
	if err != nil {
		return fmt.Errorf("statistics export: replace %s with the new dump: %w", dir, err)
	}
	return nil
}

// lock takes the export lock at path (a file, created if missing, locked
// with flock, so a crashed holder's lock goes with its process) and
// returns its release.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("statistics export: lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("statistics export: another export is writing this dump (%s is locked)", path)
		}
		return nil, fmt.Errorf("statistics export: lock %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
