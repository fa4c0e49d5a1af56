package row

// StatsUser is what the statistics export reads of a user: the columns
// BOINC's db_dump writes, and the e-mail address its public cross-project
// id is hashed with.
type StatsUser struct {
	ID             int64   `db:"id"`
	CreateTime     int64   `db:"create_time"`
	Name           string  `db:"name"`
	EmailAddr      string  `db:"email_addr"`
	CrossProjectID string  `db:"cross_project_id"`
	TotalCredit    float64 `db:"total_credit"`
	ExpavgCredit   float64 `db:"expavg_credit"`
	ExpavgTime     float64 `db:"expavg_time"`
	TeamID         int64   `db:"teamid"`
	Country        string  `db:"country"`
	URL            string  `db:"url"`
	HasProfile     bool    `db:"has_profile"`
}

// StatsTeam is what the statistics export reads of a team, with its
// founder's name (FounderFound is false when the founder's row is gone).
type StatsTeam struct {
	ID           int64   `db:"id"`
	Type         int     `db:"type"`
	Name         string  `db:"name"`
	UserID       int64   `db:"userid"`
	TotalCredit  float64 `db:"total_credit"`
	ExpavgCredit float64 `db:"expavg_credit"`
	ExpavgTime   float64 `db:"expavg_time"`
	CreateTime   int64   `db:"create_time"`
	URL          string  `db:"url"`
	NameHTML     string  `db:"name_html"`
	Description  Text    `db:"description"`
	Country      string  `db:"country"`
	FounderFound bool    `db:"founder_found"`
	FounderName  string  `db:"founder_name"`
}

// StatsHost is what the statistics export reads of a host, with the two
// things it needs of the owner: whether the owner shows their computers
// (OwnerShowHosts) and the e-mail address the host's cpid is hashed with.
// OwnerFound is false when the owner's row is gone.
type StatsHost struct {
	ID              int64   `db:"id"`
	UserID          int64   `db:"userid"`
	CreateTime      int64   `db:"create_time"`
	RPCTime         int64   `db:"rpc_time"`
	TotalCredit     float64 `db:"total_credit"`
	ExpavgCredit    float64 `db:"expavg_credit"`
	ExpavgTime      float64 `db:"expavg_time"`
	Timezone        int     `db:"timezone"`
	HostCPID        string  `db:"host_cpid"`
	PNCPUs          int     `db:"p_ncpus"`
	PVendor         string  `db:"p_vendor"`
	PModel          string  `db:"p_model"`
	PFpops          float64 `db:"p_fpops"`
	PIops           float64 `db:"p_iops"`
	PMembw          float64 `db:"p_membw"`
	MNbytes         float64 `db:"m_nbytes"`
	MCache          float64 `db:"m_cache"`
	MSwap           float64 `db:"m_swap"`
	DTotal          float64 `db:"d_total"`
	DFree           float64 `db:"d_free"`
	NBwup           float64 `db:"n_bwup"`
	NBwdown         float64 `db:"n_bwdown"`
	AvgTurnaround   float64 `db:"avg_turnaround"`
	CreditPerCPUSec float64 `db:"credit_per_cpu_sec"`
	OSName          string  `db:"os_name"`
	OSVersion       string  `db:"os_version"`
	OwnerFound      bool    `db:"owner_found"`
	OwnerShowHosts  bool    `db:"owner_show_hosts"`
}
