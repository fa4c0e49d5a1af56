package filedeleter

import (
	"context"
	"time"

	"github.com/taskserver/taskserver/internal/store"
)

// tableSharedFile labels the shared files' rows in the metrics.
const tableSharedFile = "shared_file"

// deleteShared deletes up to a batch of the shared files (shared_file) that
// no job still needing its files refers to and that none referred to for
// SharedFileGrace, and returns how many it marked deleted. It goes in
// three steps, each safe to stop after: the rows move from live to being
// deleted in one conditional statement (store.SharedFileMarkDeleting: from
// then on no job can refer to them, and a job referring to one at the same
// moment either wins and keeps it, or is refused); then the files being
// deleted (these and any a stopped pass left) and their gzip'd copies are
// deleted; then those whose files are gone are marked deleted. A file that
// cannot be deleted leaves its row being deleted, for the next pass.
func (s *Service) deleteShared(ctx context.Context) (int, error) {
	p := store.SharedFileDeleteParams{RefBefore: s.now().Add(-s.cfg.SharedFileGrace).Unix(), Mod: s.cfg.Mod,
		ModIndex: s.cfg.ModIndex, Limit: s.cfg.Batch}
	if _, err := s.st.SharedFileMarkDeleting(ctx, p); err != nil {
		return 0, err
	}
	files, err := s.st.SharedFileListDeleting(ctx, p)
	if err != nil || len(files) == 0 {
		return 0, err
	}
	s.enumerated += len(files)
	var done []int64
	var deleted, missing, errs int
	for _, sf := range files {
		names := []file{{name: sf.Name}}
		if sf.GzippedNbytes > 0 {
			names = append(names, file{name: sf.Name, suffix: gzSuffix})
		}
		failed := errs
		for _, f := range names {
			s.count(kindShared, deleteFile(s.cfg.DownloadDir, f, s.cfg.Fanout), &deleted, &missing, &errs,
				"shared_file_id", sf.ID, f)
		}
		if errs == failed {
			done = append(done, sf.ID)
		}
	}
	n, err := s.st.SharedFileMarkDeleted(ctx, done)
	if err != nil {
		return 0, err
	}
	s.m.rows.WithLabelValues(tableSharedFile, "done").Add(float64(n))
	s.log.Info("deleted shared files", "shared_files", n, "files_deleted", deleted, "files_missing", missing,
		"errors", errs, "grace", s.cfg.SharedFileGrace.Round(time.Second))
	return int(n), nil
}
