package paperbench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/jobxml"
	"github.com/taskserver/taskserver/internal/outputfile"
)

// outputData is the output every instance of the job computes: the same
// bytes for both instances, so the bitwise validator finds them equal.
func outputData(wuName string) []byte {
	return fmt.Appendf(nil, "paper benchmark output of %s\n", wuName)
}

// stageOutputs writes every unsent instance's output files into the upload
// directory before the dispatch phase is measured, as finished uploads.
// The paper's dispatch phase measures scheduler requests only; uploads go
// through the data server and are not part of any phase. Creating 100,000
// files costs this machine's kernel about as much CPU as the scheduler's
// requests do, so writing them during dispatch (as the load generator did)
// took cores from the server under test without showing in its figures.
func (b *bench) stageOutputs(ctx context.Context) error {
	dir := filepath.Join(b.proj.dir, "upload")
	var after int64
	staged := 0
	for {
		rows, err := b.db.QueryContext(ctx, `SELECT r.id, r.xml_doc_in, w.name FROM result r
			JOIN workunit w ON w.id = r.workunitid
			WHERE r.id > ? AND r.server_state = 2 ORDER BY r.id LIMIT 2000`, after)
		if err != nil {
			return fmt.Errorf("list instances to stage: %w", err)
		}
		n := 0
		for rows.Next() {
			var doc, wu string
			if err := rows.Scan(&after, &doc, &wu); err != nil {
				rows.Close()
				return err
			}
			n++
			outs, err := jobxml.ParseResult(doc)
			if err != nil {
				rows.Close()
				return fmt.Errorf("instance %d: %w", after, err)
			}
			data := outputData(wu)
			for _, o := range outs {
				path, err := fanout.Path(dir, o.Name, 1024)
				if err != nil {
					rows.Close()
					return err
				}
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					rows.Close()
					return err
				}
				if err := os.WriteFile(path, data, 0o644); err != nil {
					rows.Close()
					return err
				}
				// Finished, as the data server leaves an upload; the
				// scheduler counts nothing else.
				if err := os.Chmod(path, outputfile.FinishedMode); err != nil {
					rows.Close()
					return err
				}
				staged++
			}
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	// Written back now, not during the measured phase.
	if f, err := os.Open(dir); err == nil {
		_ = unix.Syncfs(int(f.Fd()))
		f.Close()
	}
	fmt.Fprintf(b.opts.Out, "staged %d output files in %s\n", staged, dir)
	return nil
}
