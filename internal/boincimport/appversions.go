package boincimport

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/row"
	"github.com/taskserver/taskserver/internal/store"
)

// storeWorkunit is a BOINC job as the store reads it.
type storeWorkunit = store.BoincWorkunit

// appVersions imports the app versions: each document turned into ours
// with its signatures as they are, each file placed where our data server
// serves it. A version whose document cannot be turned into ours stops
// the import unless it is deprecated (its files are often gone by then);
// a deprecated one is skipped, and listed.
func (im *Importer) appVersions(ctx context.Context, rep *Report) (TableReport, error) {
	tr := TableReport{Table: "app_version"}
	vs, err := im.src.AppVersionList(ctx)
	if err != nil {
		return tr, err
	}
	tr.Source = int64(len(vs))
	ids := make([]int64, len(vs))
	for i, v := range vs {
		ids[i] = v.ID
	}
	ourMax, err := im.dst.ImportMaxID(ctx, "app_version")
	if err != nil {
		return tr, err
	}
	write, err := im.check(ctx, &tr, "app_version", ids, ourMax, func(i int) string {
		v := vs[i]
		return fmt.Sprintf("%d,%d,%d,%s", v.AppID, v.PlatformID, v.VersionNum, v.PlanClass)
	})
	if err != nil {
		return tr, err
	}
	placed := map[string]bool{}
	for i, v := range vs {
		if !write[i] {
			continue
		}
		doc, files, err := ConvertAppVersion(v.XMLDoc, im.readAppFile)
		if err != nil {
			if v.Deprecated {
				im.skip(&tr, v.ID, err)
				continue
			}
			return tr, fmt.Errorf("app version %d (app %d, version %d): %w", v.ID, v.AppID, v.VersionNum, err)
		}
		for _, f := range files {
			if placed[f] {
				continue
			}
			placed[f] = true
			ok, err := im.placeAppFile(f)
			if err != nil {
				return tr, fmt.Errorf("app version %d: %w", v.ID, err)
			}
			rel, _ := fanout.Rel(f, im.cfg.Fanout)
			if ok {
				rep.AppFiles = append(rep.AppFiles, rel)
			} else {
				rep.MissingAppFiles = append(rep.MissingAppFiles, rel)
			}
		}
		if !im.cfg.DryRun {
			if err := im.dst.AppVersionImport(ctx, row.AppVersion{ID: v.ID, CreateTime: v.CreateTime, AppID: v.AppID, VersionNum: v.VersionNum,
				PlatformID: v.PlatformID, PlanClass: v.PlanClass, XMLDoc: doc, Deprecated: v.Deprecated, Beta: v.Beta}); err != nil {
				return tr, err
			}
		}
		tr.Imported++
	}
	return tr, nil
}

// errNoOldDownloadDir is why an app file's md5 cannot be read.
var errNoOldDownloadDir = errors.New("no --boinc-download-dir (or --boinc-project-dir) to read it from")

// readAppFile returns the md5 and size of an app file in the BOINC
// project's download directory.
func (im *Importer) readAppFile(name string) (string, float64, error) {
	if im.cfg.OldDownloadDir == "" {
		return "", 0, errNoOldDownloadDir
	}
	if err := fanout.ValidName(name); err != nil {
		return "", 0, err
	}
	return fileMD5(filepath.Join(im.cfg.OldDownloadDir, name))
}

func fileMD5(path string) (string, float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := md5.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), float64(n), nil
}

// placeAppFile makes app file name available in our download directory,
// under its fan-out directory, where our scheduler's URLs point: a hard
// link to BOINC's copy (a copy across file systems). A file already there
// must have the same content. It reports false when the file is neither
// there nor in BOINC's download directory: the operator must place it. A
// dry run places nothing and reports whether the file could be placed.
func (im *Importer) placeAppFile(name string) (bool, error) {
	dst, err := fanout.Path(im.cfg.DownloadDir, name, im.cfg.Fanout)
	if err != nil {
		return false, err
	}
	var src string
	if im.cfg.OldDownloadDir != "" {
		src = filepath.Join(im.cfg.OldDownloadDir, name)
	}
	if _, err := os.Stat(dst); err == nil {
		if src == "" {
			return true, nil
		}
		a, _, err := fileMD5(src)
		if err != nil {
			return true, nil // BOINC's copy is gone; ours stands
		}
		b, _, err := fileMD5(dst)
		if err != nil {
			return false, err
		}
		if a != b {
			return false, fmt.Errorf("app file %s: %s differs from BOINC's %s (app files never change; remove ours or rename)", name, dst, src)
		}
		return true, nil
	}
	if src == "" {
		return false, nil
	}
	if _, err := os.Stat(src); err != nil {
		return false, nil // not there: listed for the operator
	}
	if im.cfg.DryRun {
		return true, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return false, err
	}
	if err := os.Link(src, dst); err == nil {
		return true, nil
	}
	return true, copyFile(src, dst)
}

// copyFile copies src to dst through a temporary file, so a crash leaves
// no partial app file under dst's name.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".import-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
