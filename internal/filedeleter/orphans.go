package filedeleter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/taskserver/taskserver/internal/fanout"
)

// The orphan sweep deletes uploaded files that no result row names: uploads
// that arrived after their result's row was purged (a host silent past its
// deadline that reports days later), or that belong to a result whose row
// was deleted some other way. The data server never reads the database, so
// it stores them like any other upload, and without the sweep nothing
// would ever delete them. It is BOINC's file_deleter "antiques" pass, run
// at a low rate beside the row-driven deletion.
//
// A round walks the upload directory's fan-out buckets (named as package
// fanout names them for the configured fan-out) and looks at each entry
// once. It starts at most once per OrphanEvery and proceeds a step per
// pass, each step looking at up to orphanStep × Batch entries, so a pass
// stays short however many files there are; the open bucket is kept
// between steps and read on where the last step stopped. A regular file is
// deleted when all of these hold:
//   - its last change (mtime) is at least OrphanAge old: a file being
//     uploaded changes at every write, and a file only just uploaded may
//     belong to a result whose report is still on its way; a tombstone's
//     mtime is its certificates' expiry, ahead of now while they are good;
//   - it is in the bucket its name hashes to, and its name is
//     <result name>_<digits> (jobxml.OutputName);
//   - no result row, in any state, has that result name: a row that exists
//     has its files deleted through file_delete_state, or keeps them.
//
// Everything else is left alone and counted: symbolic links (never
// followed), directories, files in no bucket or in the wrong one, and
// names that do not parse. The walk goes through an os.Root, so neither a
// name nor a link can lead it outside the upload directory. Names are
// looked up a Batch at a time; before a file is deleted it is looked at
// again, and kept if it changed since (another inode, or written to).
// Deleting is idempotent: a file already gone is not an error, so a crash
// mid-round costs nothing but the rest of the round, which the next round
// covers.
//
// With --mod above 1 only replica 0 sweeps: replicas share the upload
// directory, and one sweep of it suffices.

// orphanStep is how many directory entries a pass looks at, in Batches;
// orphanChunk is how many are read from a directory at once. Candidates
// for a lookup are at most a Batch and a chunk.
const (
	orphanStep  = 10
	orphanChunk = 256
)

// Outcomes of a file looked at by the orphan sweep (label outcome).
const (
	orphanYoung        = "young"        // changed less than OrphanAge ago
	orphanReferenced   = "referenced"   // its result's row exists
	orphanOrphan       = "orphan"       // old and no row: deleted
	orphanUnrecognised = "unrecognised" // not a regular file, not in its bucket, or a name that does not parse
)

// orphanSweep is the state of the round under way, if any.
type orphanSweep struct {
	next    time.Time // earliest start of the next round
	root    *os.Root  // the upload directory while a round is under way
	bucket  int       // the bucket being read, or next to be
	dir     *os.File  // bucket's directory while it is being read
	pending []orphanCandidate
	started time.Time
	counts  map[string]int // this round's files by outcome, for its log line
	deleted int
}

// orphanCandidate is an old file whose name parsed, waiting for its lookup.
type orphanCandidate struct {
	rel    string      // bucket/name under the upload directory
	result string      // the result name its name derives from
	info   fs.FileInfo // as first looked at, to see whether it changed
}

// sweeps reports whether this replica runs the orphan sweep.
func (s *Service) sweeps() bool {
	return s.cfg.OrphanAge > 0 && (s.cfg.Mod <= 1 || s.cfg.ModIndex == 0)
}

// sweepOrphans runs one step of the orphan sweep, starting a round if none
// is under way and one is due. Only a failed lookup is returned: the
// database is needed to tell an orphan from a live file, and the daemon
// backs off. A file system error is logged and counted, and the sweep
// goes on with the next file or bucket.
func (s *Service) sweepOrphans(ctx context.Context) error {
	if !s.sweeps() {
		return nil
	}
	o := &s.orphans
	now := s.now()
	if o.root == nil {
		if now.Before(o.next) {
			return nil
		}
		o.next = now.Add(s.cfg.OrphanEvery)
		root, err := os.OpenRoot(s.cfg.UploadDir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing was ever uploaded
		}
		if err != nil {
			s.orphanError("cannot open the upload directory", s.cfg.UploadDir, err)
			return nil
		}
		*o = orphanSweep{next: o.next, root: root, pending: o.pending[:0], started: now, counts: map[string]int{}}
	}
	// Candidates a failed lookup left behind go first.
	if err := s.flushOrphans(ctx, now); err != nil {
		return err
	}
	budget := s.cfg.Batch * orphanStep
	for budget > 0 {
		if o.dir == nil {
			if o.bucket >= max(s.cfg.Fanout, 1) {
				return s.finishRound(ctx, now)
			}
			o.dir = s.openBucket(bucketName(o.bucket))
			if o.dir == nil {
				o.bucket++
				continue
			}
		}
		entries, err := o.dir.ReadDir(min(budget, orphanChunk))
		for _, e := range entries {
			budget--
			s.examine(path.Join(bucketName(o.bucket), e.Name()), e.Type(), now)
		}
		if len(o.pending) >= s.cfg.Batch {
			// A failed lookup loses nothing: what was read stays pending.
			if err := s.flushOrphans(ctx, now); err != nil {
				return err
			}
		}
		if err != nil || len(entries) == 0 {
			if err != nil && !errors.Is(err, io.EOF) {
				s.orphanError("cannot read upload bucket", bucketName(o.bucket), err)
			}
			o.dir.Close()
			o.dir = nil
			o.bucket++
		}
	}
	return s.flushOrphans(ctx, now)
}

// bucketName is the name of fan-out bucket i, as fanout.Dir writes it.
func bucketName(i int) string { return fmt.Sprintf("%x", i) }

// openBucket opens a bucket of the upload directory for reading, or
// returns nil when there is none to read: absent (no file ever hashed to
// it), or not a directory (a symbolic link is not followed).
func (s *Service) openBucket(name string) *os.File {
	o := &s.orphans
	st, err := o.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		s.orphanError("cannot look at upload bucket", name, err)
		return nil
	case !st.IsDir():
		s.log.Warn("orphan sweep: upload bucket is not a directory; not swept", "bucket", name, "mode", st.Mode().String())
		return nil
	}
	f, err := o.root.Open(name)
	if err != nil {
		s.orphanError("cannot open upload bucket", name, err)
		return nil
	}
	if fst, err := f.Stat(); err != nil || !os.SameFile(st, fst) {
		f.Close() // replaced between the two looks: the next round sees it
		return nil
	}
	return f
}

// examine looks at the entry rel of the type typ the directory reported,
// counts it, and queues it for a lookup when it may be an orphan.
func (s *Service) examine(rel string, typ fs.FileMode, now time.Time) {
	if !typ.IsRegular() {
		s.countOrphan(orphanUnrecognised)
		return
	}
	info, err := s.orphans.root.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return // deleted since the directory was read
	case err != nil:
		s.orphanError("cannot look at upload", rel, err)
		return
	case !info.Mode().IsRegular():
		s.countOrphan(orphanUnrecognised)
		return
	case !s.old(info, now):
		s.countOrphan(orphanYoung)
		return
	}
	result, ok := resultOf(rel, s.cfg.Fanout)
	if !ok {
		s.countOrphan(orphanUnrecognised)
		return
	}
	s.orphans.pending = append(s.orphans.pending, orphanCandidate{rel: rel, result: result, info: info})
}

// old reports whether a file last changed at least OrphanAge before now.
func (s *Service) old(info fs.FileInfo, now time.Time) bool {
	return now.Sub(info.ModTime()) >= s.cfg.OrphanAge
}

// resultOf returns the name of the result whose output rel ("bucket/name")
// would be: name is <result>_<digits>, a valid file name, in the bucket it
// hashes to for fan-out fan.
func resultOf(rel string, fan int) (string, bool) {
	bucket, name, _ := strings.Cut(rel, "/")
	if fanout.ValidName(name) != nil || fanout.Dir(name, fan) != bucket {
		return "", false
	}
	us := strings.LastIndexByte(name, '_')
	if us < 1 || us == len(name)-1 {
		return "", false
	}
	for _, c := range []byte(name[us+1:]) {
		if c < '0' || c > '9' {
			return "", false
		}
	}
	return name[:us], true
}

// flushOrphans looks up the results of the pending candidates and deletes
// the files of those that have no row. On a failed lookup the candidates
// stay pending for the next step.
func (s *Service) flushOrphans(ctx context.Context, now time.Time) error {
	o := &s.orphans
	if len(o.pending) == 0 {
		return nil
	}
	names := make([]string, 0, len(o.pending))
	seen := make(map[string]bool, len(o.pending))
	for _, c := range o.pending {
		if !seen[c.result] {
			seen[c.result] = true
			names = append(names, c.result)
		}
	}
	existing, err := s.st.ResultNamesExisting(ctx, names)
	if err != nil {
		return fmt.Errorf("orphan sweep: %w", err)
	}
	live := make(map[string]bool, len(existing))
	for _, n := range existing {
		live[n] = true
	}
	for _, c := range o.pending {
		if live[c.result] {
			s.countOrphan(orphanReferenced)
			continue
		}
		s.countOrphan(orphanOrphan)
		s.deleteOrphan(c, now)
	}
	o.pending = o.pending[:0]
	return nil
}

// deleteOrphan deletes the orphan c unless it changed since it was looked
// at (then the next round decides again).
func (s *Service) deleteOrphan(c orphanCandidate, now time.Time) {
	root := s.orphans.root
	cur, err := root.Lstat(c.rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		s.orphanError("cannot look at orphaned upload", c.rel, err)
		return
	case !cur.Mode().IsRegular() || !os.SameFile(cur, c.info) || !s.old(cur, now):
		return
	}
	if err := root.Remove(c.rel); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			s.orphanError("cannot delete orphaned upload", c.rel, err)
		}
		return
	}
	s.m.orphansDeleted.Inc()
	s.orphans.deleted++
	s.log.Debug("deleted orphaned upload", "file", c.rel, "bytes", cur.Size(), "mtime", cur.ModTime())
}

// finishRound deletes what the round still holds, logs it and closes it.
func (s *Service) finishRound(ctx context.Context, now time.Time) error {
	if err := s.flushOrphans(ctx, now); err != nil {
		return err
	}
	o := &s.orphans
	s.log.Info("orphan sweep done", "files", o.counts[orphanYoung]+o.counts[orphanReferenced]+o.counts[orphanOrphan]+o.counts[orphanUnrecognised],
		"young", o.counts[orphanYoung], "referenced", o.counts[orphanReferenced], "unrecognised", o.counts[orphanUnrecognised],
		"orphans_deleted", o.deleted, "took", now.Sub(o.started).Round(time.Second))
	s.closeRound()
	return nil
}

// closeRound releases the round's open directories.
func (s *Service) closeRound() {
	o := &s.orphans
	if o.dir != nil {
		o.dir.Close()
		o.dir = nil
	}
	if o.root != nil {
		o.root.Close()
		o.root = nil
	}
	o.pending = o.pending[:0]
}

func (s *Service) countOrphan(outcome string) {
	s.m.orphanFiles.WithLabelValues(outcome).Inc()
	s.orphans.counts[outcome]++
}

func (s *Service) orphanError(msg, file string, err error) {
	s.m.errors.WithLabelValues(kindOrphan).Inc()
	s.log.Warn("orphan sweep: "+msg, "file", file, "error", err)
}

// Close releases the directories an orphan sweep under way holds open.
func (s *Service) Close() error {
	s.closeRound()
	return nil
}
