package store

import (
	"context"
	"fmt"

	"github.com/taskserver/taskserver/internal/state"
)

// The scale benchmark's bulk loads (make bench-scale). They fill an empty
// project database with millions of rows in the shapes the daemons write,
// without the daemons: each statement makes up to ScaleChunk rows on the
// server from MariaDB's sequence engine (seq_0_to_N), so the load costs no
// round trip per row and each chunk commits on its own. Ids are given, not
// drawn, so a job's instances, hosts and owners follow from the numbers.

// ScaleChunk is the most rows one fill statement inserts.
const ScaleChunk = 50000

// seqTable names the sequence-engine table of 0 … n-1 (n >= 1).
func seqTable(n int64) string { return fmt.Sprintf("seq_0_to_%d", n-1) }

// ScaleUsers describes the volunteer accounts ScaleFillUsers makes: ids
// 1 … N, authenticator AuthPrefix<id>.
type ScaleUsers struct {
	N          int64
	AuthPrefix string
	Now        int64
}

const scaleUserInsert = `INSERT INTO user (id, create_time, email_addr, name, authenticator, total_credit, expavg_credit, expavg_time)
SELECT ? + seq, ?, CONCAT('scale', ? + seq, '@example.org'), CONCAT('scale', ? + seq), CONCAT(?, ? + seq),
  (seq %% 1000) * 10.0, (seq %% 100) * 1.0, ?
FROM %s`

// ScaleFillUsers inserts the accounts.
func (s *Store) ScaleFillUsers(ctx context.Context, u ScaleUsers) error {
	return scaleChunks(u.N, func(lo, n int64) error {
		first := lo + 1
		_, err := s.db.ExecContext(ctx, fmt.Sprintf(scaleUserInsert, seqTable(n)),
			first, u.Now, first, first, u.AuthPrefix, first, u.Now)
		if err != nil {
			return fmt.Errorf("fill users %d…: %w", first, err)
		}
		return nil
	})
}

// ScaleHosts describes the hosts ScaleFillHosts makes: ids 1 … N, host i
// owned by user 1 + (i-1) mod Users, with cross-project id MD5(i). Of every
// ten hosts, one has an NVIDIA GPU (i mod 10 = 0), one an AMD GPU (1), three
// have eight cores (2, 3, 4) and the rest four.
type ScaleHosts struct {
	N, Users int64
	Now      int64
}

const scaleHostInsert = `INSERT INTO host (id, create_time, userid, rpc_seqno, rpc_time, domain_name, last_ip_addr,
  host_cpid, p_ncpus, p_vendor, p_model, p_fpops, p_iops, m_nbytes, m_swap, d_total, d_free, os_name, os_version,
  on_frac, active_frac, avg_turnaround, p_features, client_version, total_credit, expavg_credit, expavg_time)
SELECT ? + seq, ? - 86400 * 30, 1 + (? + seq - 1) %% ?, 10, ? - (seq * 7919) %% 86400,
  CONCAT('host', ? + seq, '.example.org'), '127.0.0.1', MD5(? + seq),
  IF((? + seq) %% 10 IN (2, 3, 4), 8, 4), 'GenuineIntel', 'Intel(R) Core(TM) i7', 4e9, 1e10, 16e9, 2e9, 5e11, 2e11,
  'Linux', '6.1.0', 0.9, 0.9, 86400, 'fpu sse sse2 avx avx2', 72405, (seq %% 1000) * 5.0, (seq %% 100) * 1.0, ?
FROM %s`

// ScaleFillHosts inserts the hosts.
func (s *Store) ScaleFillHosts(ctx context.Context, h ScaleHosts) error {
	return scaleChunks(h.N, func(lo, n int64) error {
		first := lo + 1
		_, err := s.db.ExecContext(ctx, fmt.Sprintf(scaleHostInsert, seqTable(n)),
			first, h.Now, first, max(h.Users, 1), h.Now, first, first, first, h.Now)
		if err != nil {
			return fmt.Errorf("fill hosts %d…: %w", first, err)
		}
		return nil
	})
}

// ScaleJobs is one group of alike jobs and their instances for
// ScaleFillJobs. Job k of the group (0 … N-1) has id FirstJobID + k, name
// NamePrefix<id>, app AppIDs[k mod 3]; its instance j has id
// FirstResultID + k·Results + j and name <job name>_<j>. A sent instance
// went to host 1 + (instance id · 7919) mod Hosts (and that host's user),
// with the version of the app for that host's hardware.
type ScaleJobs struct {
	FirstJobID, FirstResultID, N int64
	Results                      int
	NamePrefix                   string
	// AppIDs are three apps; Versions are each app's [NVIDIA, AMD,
	// multi-threaded, CPU] version ids, app after app (12 ids).
	AppIDs   [3]int64
	Versions [12]int64
	// WUDoc and ResultDoc are the documents with "@@" where the job's and
	// the instance's name go; ResultOut is an instance's xml_doc_out (only
	// for reported ones).
	WUDoc, ResultDoc, ResultOut string
	Hosts, Users                int64
	Now                         int64

	// The job's state.
	NeedValidate    bool
	Canonical       bool // canonical_resultid is the first instance
	TransitionTime  int64
	TransitionSpred int64 // transition_time = TransitionTime + (k·7919) mod spread
	FileDeleteState state.FileDeleteState
	AssimilateState state.AssimilateState
	ModTime         int64
	ModSpread       int64 // mod_time = ModTime - (k·7919) mod spread

	// The instances' state.
	ServerState   state.ServerState
	Outcome       state.Outcome
	ValidateState state.ValidateState
	ResultFileDel state.FileDeleteState
	Sent          bool  // hostid, userid, sent_time, report_deadline set
	Reported      bool  // received_time, xml_doc_out, cpu_time set
	SentAgo       int64 // sent_time = Now - (id·7919) mod SentAgo
	DeadlineAfter int64 // report_deadline = sent_time + DeadlineAfter
}

const scaleWorkunitInsert = `INSERT INTO workunit (id, create_time, appid, name, xml_doc, rsc_fpops_est, rsc_fpops_bound,
  rsc_memory_bound, rsc_disk_bound, need_validate, canonical_resultid, canonical_credit, transition_time, delay_bound,
  file_delete_state, assimilate_state, min_quorum, target_nresults, max_error_results, max_total_results,
  max_success_results, mod_time)
SELECT ? + seq, ? - 86400, ELT(1 + (? + seq) %% 3, ?, ?, ?), CONCAT(?, ? + seq), REPLACE(?, '@@', CONCAT(?, ? + seq)),
  1e13, 1e14, 5e8, 1e9, ?, IF(?, ? + seq * ?, 0), IF(?, 50, 0), ? + ((? + seq) * 7919) %% ?, 14 * 86400,
  ?, ?, 2, 2, 3, 6, 3, ? - ((? + seq) * 7919) %% ?
FROM %s`

// The host of instance id: 1 + (id·7919) mod Hosts.
const scaleHostOf = `(1 + ((? + seq) * 7919) %% ?)`

const scaleResultInsert = `INSERT INTO result (id, create_time, workunitid, server_state, outcome, client_state, hostid, userid,
  report_deadline, sent_time, received_time, name, cpu_time, elapsed_time, xml_doc_in, xml_doc_out, file_delete_state,
  validate_state, granted_credit, appid, random, app_version_num, app_version_id, mod_time)
SELECT ? + seq, ? - 86400, ? + seq DIV ?, ?, ?, IF(?, 5, 0),
  IF(?, ` + scaleHostOf + `, 0), IF(?, 1 + (` + scaleHostOf + ` - 1) %% ?, 0),
  IF(?, ? - ((? + seq) * 7919) %% ? + ?, 0), IF(?, ? - ((? + seq) * 7919) %% ?, 0), IF(?, ? - 3600, 0),
  CONCAT(?, ? + seq DIV ?, '_', seq %% ?), IF(?, 3600, 0), IF(?, 3600, 0),
  REPLACE(?, '@@', CONCAT(?, ? + seq DIV ?, '_', seq %% ?)),
  IF(?, REPLACE(?, '@@', CONCAT(?, ? + seq DIV ?, '_', seq %% ?)), NULL), ?, ?, IF(? = 1, 50, 0),
  ELT(1 + (? + seq DIV ?) %% 3, ?, ?, ?), (seq * 104729) %% 2147483647, IF(?, 100, 0),
  IF(?, ELT(1 + ((? + seq DIV ?) %% 3) * 4 + LEAST(` + scaleHostOf + ` %% 10, 3), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), 0),
  ? - ((? + seq DIV ?) * 7919) %% ?
FROM %s`

const scaleWorkunitUserInsert = `INSERT IGNORE INTO workunit_user (workunitid, userid, resultid)
SELECT workunitid, userid, id FROM result WHERE id >= ? AND id < ? AND userid > 0`

// ScaleFillJobs inserts the group's jobs, then their instances, then the
// workunit_user rows of the sent instances (one per job and user, as the
// scheduler keeps them).
func (s *Store) ScaleFillJobs(ctx context.Context, g ScaleJobs) error {
	spread := func(v int64) int64 { return max(v, 1) }
	err := scaleChunks(g.N, func(lo, n int64) error {
		first := g.FirstJobID + lo
		k0 := lo
		_, err := s.db.ExecContext(ctx, fmt.Sprintf(scaleWorkunitInsert, seqTable(n)),
			first, g.Now, k0, g.AppIDs[0], g.AppIDs[1], g.AppIDs[2], g.NamePrefix, first, g.WUDoc, g.NamePrefix, first,
			g.NeedValidate, g.Canonical, g.FirstResultID+lo*int64(g.Results), g.Results, g.Canonical,
			g.TransitionTime, k0, spread(g.TransitionSpred),
			int(g.FileDeleteState), int(g.AssimilateState), g.ModTime, k0, spread(g.ModSpread))
		if err != nil {
			return fmt.Errorf("fill jobs %s%d…: %w", g.NamePrefix, first, err)
		}
		return nil
	})
	if err != nil || g.Results == 0 {
		return err
	}
	k := int64(g.Results)
	hosts, users := max(g.Hosts, 1), max(g.Users, 1)
	return scaleChunksOf(g.N, ScaleChunk/k, func(jlo, jn int64) error {
		lo, n := jlo*k, jn*k // whole jobs per chunk
		first := g.FirstResultID + lo
		job := g.FirstJobID + lo/k
		jk := lo / k // the job's index in the group
		args := []any{first, g.Now, job, k, int(g.ServerState), int(g.Outcome), g.Reported,
			g.Sent, first, hosts, g.Sent, first, hosts, users,
			g.Sent, g.Now, first, spread(g.SentAgo), g.DeadlineAfter, g.Sent, g.Now, first, spread(g.SentAgo), g.Reported, g.Now,
			g.NamePrefix, job, k, k, g.Reported, g.Reported,
			g.ResultDoc, g.NamePrefix, job, k, k,
			g.Reported, g.ResultOut, g.NamePrefix, job, k, k, int(g.ResultFileDel), int(g.ValidateState), int(g.ValidateState),
			jk, k, g.AppIDs[0], g.AppIDs[1], g.AppIDs[2], g.Sent,
			g.Sent, jk, k, first, hosts}
		for _, v := range g.Versions {
			args = append(args, v)
		}
		args = append(args, g.ModTime, jk, k, spread(g.ModSpread))
		if _, err := s.db.ExecContext(ctx, fmt.Sprintf(scaleResultInsert, seqTable(n)), args...); err != nil {
			return fmt.Errorf("fill instances %d…: %w", first, err)
		}
		if g.Sent {
			if _, err := s.db.ExecContext(ctx, scaleWorkunitUserInsert, first, first+n); err != nil {
				return fmt.Errorf("fill workunit_user of instances %d…: %w", first, err)
			}
		}
		return nil
	})
}

// scaleChunks calls fill(lo, n) for consecutive chunks of at most
// ScaleChunk of total rows, lo counted from 0.
func scaleChunks(total int64, fill func(lo, n int64) error) error {
	return scaleChunksOf(total, ScaleChunk, fill)
}

// scaleChunksOf is scaleChunks with chunks of size rows.
func scaleChunksOf(total, size int64, fill func(lo, n int64) error) error {
	for lo := int64(0); lo < total; lo += size {
		if err := fill(lo, min(size, total-lo)); err != nil {
			return err
		}
	}
	return nil
}
