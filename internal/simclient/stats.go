package simclient

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/taskserver/taskserver/internal/simreport"
)

// Stats is a snapshot of a run's counters. Counts of results count tasks
// (one result each), not files.
type Stats struct {
	// Hosts is the number of simulated hosts; HostsByKind splits it by kind
	// (normal, failing, vanishing, cheating, late).
	Hosts       int64            `json:"hosts"`
	HostsByKind map[string]int64 `json:"hosts_by_kind"`
	// RPCs counts scheduler RPCs sent; RPCErrors those that failed (HTTP
	// error, 5xx, unparseable reply, project down, no host id).
	RPCs      int64 `json:"rpcs"`
	RPCErrors int64 `json:"rpc_errors"`
	// ResultsReceived counts tasks the scheduler sent.
	ResultsReceived int64 `json:"results_received"`
	// ResultsComputed counts tasks that finished computing with an output
	// (correct or cheated).
	ResultsComputed int64 `json:"results_computed"`
	// ResultsUploaded counts tasks whose every output file was uploaded.
	ResultsUploaded int64 `json:"results_uploaded"`
	// UploadErrors and DownloadErrors count failed transfer attempts,
	// transient or permanent.
	UploadErrors   int64 `json:"upload_errors"`
	DownloadErrors int64 `json:"download_errors"`
	// FilesDownloaded counts input files downloaded, GzippedDownloads
	// those of them fetched gzip'd (from a gzipped_url), and StickyReused
	// inputs a task took from the sticky files its host held instead.
	FilesDownloaded  int64 `json:"files_downloaded"`
	GzippedDownloads int64 `json:"gzipped_downloads"`
	StickyReused     int64 `json:"sticky_reused"`
	// FilesUploaded counts output files uploaded.
	FilesUploaded int64 `json:"files_uploaded"`
	// TricklesSent counts trickle-up messages apps sent (each counted
	// once, however often the host sends it); TricklesAcked those a reply
	// acknowledged; TrickleDowns the trickle-down messages received.
	TricklesSent  int64 `json:"trickles_sent"`
	TricklesAcked int64 `json:"trickles_acked"`
	TrickleDowns  int64 `json:"trickle_downs"`
	// ResultsReported counts tasks reported at least once; ResultRereports
	// counts further reports of a task not yet acknowledged.
	ResultsReported int64 `json:"results_reported"`
	ResultRereports int64 `json:"result_rereports"`
	// ResultsAcked counts tasks the server acknowledged (and the host then
	// forgot).
	ResultsAcked int64 `json:"results_acked"`
	// ResultsFailed counts tasks finished with an error: compute errors of
	// failing hosts, permanent download or upload failures.
	ResultsFailed int64 `json:"results_failed"`
	// ResultsVanished counts tasks held by hosts when they vanished.
	ResultsVanished int64 `json:"results_vanished"`
	// ResultsCheated counts wrong outputs produced by cheating hosts.
	ResultsCheated int64 `json:"results_cheated"`
	// ResultsAborted counts tasks dropped on the server's result_abort.
	ResultsAborted int64 `json:"results_aborted"`
	// ResultsLate counts tasks first reported after their report deadline
	// (by late hosts on purpose, by others when slow).
	ResultsLate int64 `json:"results_late"`
	// Preemptions counts running tasks the CPU scheduler suspended for
	// another (only the debt and edf strategies preempt).
	Preemptions int64 `json:"preemptions"`
	// ByKind splits the result counts by host kind.
	ByKind map[string]KindStats `json:"by_kind"`
	// Hardware is what the hosts have and how busy they kept it.
	Hardware HardwareStats `json:"hardware"`
	// Versions are the tasks computed without error per project and app
	// version, with their mean elapsed time.
	Versions []VersionStats `json:"versions,omitempty"`
	// ErrorBackoffs counts task errors (crashes, failed transfers) that
	// backed their project's RPCs off; Overloaded counts replies marked
	// <overloaded/>.
	ErrorBackoffs int64 `json:"error_backoffs"`
	Overloaded    int64 `json:"overloaded_replies"`
	// SchedulerFailovers counts RPC attempts that failed and went on to
	// the project's next scheduler URL; MasterFetches and MasterErrors
	// count reads of master pages and those that failed.
	SchedulerFailovers int64 `json:"scheduler_failovers"`
	MasterFetches      int64 `json:"master_fetches"`
	MasterErrors       int64 `json:"master_errors"`
	// ElapsedSeconds is the wall time of the run.
	ElapsedSeconds float64 `json:"elapsed_seconds"`
}

// String is the one-line summary logged periodically.
func (s Stats) String() string {
	return fmt.Sprintf("hosts=%d rpcs=%d rpc_errors=%d received=%d computed=%d uploaded=%d upload_errors=%d "+
		"reported=%d acked=%d failed=%d vanished=%d cheated=%d aborted=%d late=%d",
		s.Hosts, s.RPCs, s.RPCErrors, s.ResultsReceived, s.ResultsComputed, s.ResultsUploaded, s.UploadErrors,
		s.ResultsReported, s.ResultsAcked, s.ResultsFailed, s.ResultsVanished, s.ResultsCheated, s.ResultsAborted, s.ResultsLate)
}

// WriteFile writes s as indented JSON to path, replacing it atomically.
func (s Stats) WriteFile(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	b = append(b, '\n')
	tmp, err := os.CreateTemp(filepath.Dir(path), ".simclient-report-*")
	if err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write report: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write report: %w", err)
	}
	return nil
}

// HardwareStats describe the hosts' resources and their use (the run
// report's simreport.Hardware: GPU and multi-core hosts, GPU and mt tasks,
// busy fractions), and NoDevice: tasks the server sent for a coprocessor
// the host does not have (they fail).
type HardwareStats struct {
	simreport.Hardware
	NoDevice int64 `json:"no_device_tasks"`
}

// seconds is a shared sum of seconds, kept in microseconds.
type secondsCounter struct{ us atomic.Int64 }

func (s *secondsCounter) add(sec float64) { s.us.Add(int64(sec * 1e6)) }
func (s *secondsCounter) get() float64    { return float64(s.us.Load()) / 1e6 }

func frac(busy, avail *secondsCounter) float64 {
	if a := avail.get(); a > 0 {
		return busy.get() / a
	}
	return 0
}

// KindStats are the result counts of the hosts of one kind.
type KindStats struct {
	Received int64 `json:"received"`
	Computed int64 `json:"computed"`
	Reported int64 `json:"reported"`
	Acked    int64 `json:"acked"`
	Failed   int64 `json:"failed"`
}

// kindCounters are the live counters behind KindStats.
type kindCounters struct {
	received, computed, reported, acked, failed atomic.Int64
}

// counters are the live, shared counters behind Stats.
type counters struct {
	rpcs, rpcErrors                  atomic.Int64
	received, computed, uploaded     atomic.Int64
	uploadErrors, downloadErrors     atomic.Int64
	downloads, gzipped, stickyReused atomic.Int64
	uploadedFiles                    atomic.Int64
	trickles, tricklesAcked, downs   atomic.Int64
	reported, rereports, acked       atomic.Int64
	failed, vanished, cheated, abort atomic.Int64
	late, preempted                  atomic.Int64
	byKind                           [kindCount]kindCounters

	gpuHosts, gpus, mtHosts                atomic.Int64
	gpuTasks, mtTasks, noDevice            atomic.Int64
	errorBackoffs, overloaded              atomic.Int64
	failovers, masterFetches, masterErrors atomic.Int64
	cpuBusy, cpuAvail, gpuBusy, gpuAvail   secondsCounter
	gpuHostCPUBusy, gpuHostCPUAvail        secondsCounter
}

func (c *counters) snapshot(hostsByKind map[string]int64, elapsed time.Duration) Stats {
	s := Stats{
		HostsByKind:      make(map[string]int64, len(hostsByKind)),
		RPCs:             c.rpcs.Load(),
		RPCErrors:        c.rpcErrors.Load(),
		ResultsReceived:  c.received.Load(),
		ResultsComputed:  c.computed.Load(),
		ResultsUploaded:  c.uploaded.Load(),
		UploadErrors:     c.uploadErrors.Load(),
		DownloadErrors:   c.downloadErrors.Load(),
		FilesDownloaded:  c.downloads.Load(),
		GzippedDownloads: c.gzipped.Load(),
		StickyReused:     c.stickyReused.Load(),
		FilesUploaded:    c.uploadedFiles.Load(),
		TricklesSent:     c.trickles.Load(),
		TricklesAcked:    c.tricklesAcked.Load(),
		TrickleDowns:     c.downs.Load(),
		ResultsReported:  c.reported.Load(),
		ResultRereports:  c.rereports.Load(),
		ResultsAcked:     c.acked.Load(),
		ResultsFailed:    c.failed.Load(),
		ResultsVanished:  c.vanished.Load(),
		ResultsCheated:   c.cheated.Load(),
		ResultsAborted:   c.abort.Load(),
		ResultsLate:      c.late.Load(),
		Preemptions:      c.preempted.Load(),
		ElapsedSeconds:   elapsed.Seconds(),
		Hardware: HardwareStats{Hardware: simreport.Hardware{
			GPUHosts: c.gpuHosts.Load(), GPUs: c.gpus.Load(), MTHosts: c.mtHosts.Load(),
			GPUTasks: c.gpuTasks.Load(), MTTasks: c.mtTasks.Load(),
			CPUBusyFrac:        frac(&c.cpuBusy, &c.cpuAvail),
			GPUBusyFrac:        frac(&c.gpuBusy, &c.gpuAvail),
			GPUHostCPUBusyFrac: frac(&c.gpuHostCPUBusy, &c.gpuHostCPUAvail),
		}, NoDevice: c.noDevice.Load()},
		ErrorBackoffs:      c.errorBackoffs.Load(),
		Overloaded:         c.overloaded.Load(),
		SchedulerFailovers: c.failovers.Load(),
		MasterFetches:      c.masterFetches.Load(),
		MasterErrors:       c.masterErrors.Load(),
	}
	for k, v := range hostsByKind {
		s.HostsByKind[k] = v
		s.Hosts += v
	}
	s.ByKind = map[string]KindStats{}
	for k := range c.byKind {
		kc := &c.byKind[k]
		if name := Kind(k).String(); hostsByKind[name] > 0 {
			s.ByKind[name] = KindStats{Received: kc.received.Load(), Computed: kc.computed.Load(),
				Reported: kc.reported.Load(), Acked: kc.acked.Load(), Failed: kc.failed.Load()}
		}
	}
	return s
}
