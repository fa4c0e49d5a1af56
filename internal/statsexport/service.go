package statsexport

import (
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/taskserver/taskserver/internal/config"
)

// Config is db_dump's configuration; each setting has the rules of its
// flag.
type Config struct {
	// Dir is the dump directory the web server publishes (--out,
	// resolved against the project directory).
	Dir string
	// Interval is the time from one dump to the next (--interval), by the
	// update_time of the dump in place, so a restart does not dump again
	// early.
	Interval time.Duration
	// Batch is the rows read per query (--batch).
	Batch int
	// Mod and ModIndex must be 1 and 0: a dump is one whole file set, not
	// something replicas can share.
	Mod, ModIndex int
}

// Validate returns every problem with c, each naming its flag.
func (c Config) Validate() error {
	errs := config.CheckPartition(c.Mod, c.ModIndex, c.Batch)
	if c.Mod > 1 {
		errs = append(errs, fmt.Errorf("--mod %d: db_dump writes one whole dump; run a single instance", c.Mod))
	}
	if c.Dir == "" {
		errs = append(errs, errors.New("--out is empty"))
	}
	if c.Interval < time.Minute {
		errs = append(errs, fmt.Errorf("--interval %s: want at least 1m", c.Interval))
	}
	return errors.Join(errs...)
}

// Deps are db_dump's collaborators.
type Deps struct {
	Store   Source
	Log     *slog.Logger     // nil: discard
	Metrics *Metrics         // nil: registered nowhere
	Now     func() time.Time // nil: time.Now
}

// Service is db_dump: a pass writes a new dump when the one in place is
// Interval old (or missing), and does nothing otherwise.
type Service struct {
	st  Source
	cfg Config
	log *slog.Logger
	m   *Metrics
	now func() time.Time
}

// New returns db_dump.
func New(cfg Config, deps Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Store == nil {
		return nil, errors.New("db_dump: no store")
	}
	s := &Service{st: deps.Store, cfg: cfg, log: deps.Log, m: deps.Metrics, now: deps.Now}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.m == nil {
		s.m = NewMetrics(prometheus.NewRegistry())
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// RunOnce writes a dump if one is due and returns the records it wrote.
func (s *Service) RunOnce(ctx context.Context) (int, error) {
	now := s.now()
	last, ok, err := LastUpdate(s.cfg.Dir)
	if err != nil {
		return 0, err
	}
	if ok {
		s.m.lastExport.Set(float64(last.Unix()))
		if !due(last, now, s.cfg.Interval) {
			return 0, nil
		}
	}
	start := time.Now()
	res, err := Export(ctx, s.st, s.cfg.Dir, s.cfg.Batch, now)
	if err != nil {
		return 0, err
	}
	s.m.exports.Inc()
	s.m.records.WithLabelValues("user").Add(float64(res.Users))
	s.m.records.WithLabelValues("team").Add(float64(res.Teams))
	s.m.records.WithLabelValues("host").Add(float64(res.Hosts))
	s.m.bytes.Set(float64(res.Bytes))
	s.m.lastExport.Set(float64(res.UpdateTime))
	s.log.Info("statistics exported", "dir", s.cfg.Dir, "users", res.Users, "teams", res.Teams, "hosts", res.Hosts,
		"bytes", res.Bytes, "took", time.Since(start).Round(time.Millisecond))
	return int(res.Users + res.Teams + res.Hosts), nil
}

// due reports whether a dump made at last is Interval old at now. A dump
// stamped more than an interval in the future is from a clock that has
// since been set back: waiting for it would stop the export for that long.
func due(last, now time.Time, interval time.Duration) bool {
	return now.Sub(last) >= interval || last.Sub(now) > interval
}

// LastUpdate returns the update_time of the dump in dir; ok is false when
// there is none (no tables.xml, or one that does not parse, which the next
// dump replaces).
func LastUpdate(dir string) (t time.Time, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, TablesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, fmt.Errorf("read the dump in place: %w", err)
	}
	var v struct {
		UpdateTime *int64 `xml:"update_time"`
	}
	if xml.Unmarshal(b, &v) != nil || v.UpdateTime == nil {
		return time.Time{}, false, nil
	}
	return time.Unix(*v.UpdateTime, 0), true, nil
}
