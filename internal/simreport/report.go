package simreport

import (
	"encoding/json"
	"fmt"
	"os"
)

// Report is what a run of simulated hosts did, in simulated or real time.
// Recorder.Report builds it; ReadFile reads one back from report.json.
type Report struct {
	Clock           string          `json:"clock"`            // "simulated" or "real"
	Scenario        string          `json:"scenario"`         // scenario name or "live"
	Strategy        string          `json:"strategy"`         // CPU-scheduling strategy of the hosts
	RuntimeStat     string          `json:"runtime_stat"`     // runtime statistic of the seed-004 strategies
	Hosts           int             `json:"hosts"`            // number of hosts
	CPUs            int             `json:"cpus"`             // sum of CPUs over hosts
	DurationSeconds float64         `json:"duration_seconds"` // simulated or wall seconds covered
	WallSeconds     float64         `json:"wall_seconds"`     // how long the run itself took
	IntervalSeconds float64         `json:"interval_seconds"` // length of one Series interval
	Projects        []ProjectReport `json:"projects"`
	Totals          Totals          `json:"totals"`
	Series          []Sample        `json:"series"` // share over time, one sample per interval
	// Hardware is per-resource use, for runs with GPU or multi-core hosts.
	Hardware *Hardware `json:"hardware,omitempty"`
}

// Hardware describes the hosts' resources and how busy they were kept: a
// busy fraction is busy instance-seconds over those available while the
// hosts were on.
type Hardware struct {
	GPUHosts int64 `json:"gpu_hosts"`
	GPUs     int64 `json:"gpus"`     // GPU instances over all hosts
	MTHosts  int64 `json:"mt_hosts"` // multi-core hosts (simclient: MTCPUs; simulate: 4 CPUs or more)
	GPUTasks int64 `json:"gpu_tasks"`
	MTTasks  int64 `json:"mt_tasks"` // tasks computed on more than one CPU
	// CPUBusyFrac is over every host, GPUBusyFrac over the GPUs,
	// GPUHostCPUBusyFrac over the CPUs of the hosts with GPUs.
	CPUBusyFrac        float64 `json:"cpu_busy_frac"`
	GPUBusyFrac        float64 `json:"gpu_busy_frac"`
	GPUHostCPUBusyFrac float64 `json:"gpu_host_cpu_busy_frac"`
}

// ProjectReport is one project's part of a run.
type ProjectReport struct {
	Name string `json:"name"`
	// ResourceShare is the fraction of 1 of the computing the project should
	// get: the sum over attached hosts of its share fraction times the host's
	// CPU capacity, normalised over projects.
	ResourceShare float64 `json:"resource_share"`
	// AchievedShare is the fraction of 1 of all CPU seconds computed that
	// went to this project.
	AchievedShare      float64 `json:"achieved_share"`
	CPUSeconds         float64 `json:"cpu_seconds"`
	RPCs               int64   `json:"rpcs"`
	RPCFailures        int64   `json:"rpc_failures"`
	WorkFetchedSeconds float64 `json:"work_fetched_seconds"` // estimated CPU seconds of tasks received
	TasksFetched       int64   `json:"tasks_fetched"`
	TasksCompleted     int64   `json:"tasks_completed"`
	TasksReported      int64   `json:"tasks_reported"`
	// DeadlinesMissed counts tasks reported after their deadline, and tasks
	// still unfinished past it at the end or aborted because of it.
	DeadlinesMissed int64 `json:"deadlines_missed"`
	NoWorkReplies   int64 `json:"no_work_replies"`
	// Shortfalls counts the work requests the scheduler sent less than
	// asked, by its reason (send_shortfall_total's): what a simulated
	// server decided, as the real one would.
	Shortfalls map[string]int64 `json:"shortfalls,omitempty"`
}

// Totals sums a run over projects.
type Totals struct {
	// CPUUtilisation is CPU seconds computed over CPU seconds available
	// while hosts were on.
	CPUUtilisation      float64 `json:"cpu_utilisation"`
	CPUSeconds          float64 `json:"cpu_seconds"`
	AvailableCPUSeconds float64 `json:"available_cpu_seconds"`
	IdleCPUSeconds      float64 `json:"idle_cpu_seconds"` // available - computed, never below 0
	IdleFraction        float64 `json:"idle_fraction"`    // idle over available
	RPCs                int64   `json:"rpcs"`
	RPCFailures         int64   `json:"rpc_failures"`
	// MaxRPCsPerMinute is the most RPCs started in any one minute of the
	// run's clock: a storm of synchronised clients shows here.
	MaxRPCsPerMinute   float64 `json:"max_rpcs_per_minute"`
	WorkFetchedSeconds float64 `json:"work_fetched_seconds"`
	TasksFetched       int64   `json:"tasks_fetched"`
	TasksCompleted     int64   `json:"tasks_completed"`
	TasksReported      int64   `json:"tasks_reported"`
	DeadlinesMissed    int64   `json:"deadlines_missed"`
	NoWorkReplies      int64   `json:"no_work_replies"`
	// MaxShareError is the largest |achieved - resource| share over projects.
	MaxShareError float64 `json:"max_share_error"`
}

// Sample is one interval of the share-over-time series.
type Sample struct {
	Time float64 `json:"time"` // end of the interval, seconds since start
	// Shares is per project (in the order of Report.Projects) the fraction
	// of this interval's CPU seconds; all 0 when nothing was computed.
	Shares []float64 `json:"shares"`
	// Cumulative is per project the fraction of all CPU seconds computed
	// from the start to Time.
	Cumulative []float64 `json:"cumulative"`
}

// ReadFile reads a report.json written by WriteDir.
func ReadFile(path string) (Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Report{}, fmt.Errorf("read report: %w", err)
	}
	var r Report
	if err := json.Unmarshal(data, &r); err != nil {
		return Report{}, fmt.Errorf("decode report %s: %w", path, err)
	}
	return r, nil
}
