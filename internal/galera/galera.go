// Package galera starts a MariaDB Galera cluster of private servers for
// one run: N mariadbd processes on loopback, each with a fresh data
// directory and free ports of its own (client, group communication,
// incremental and full state transfer), root without a password. Node 1
// bootstraps the cluster and the others join it with a full state transfer
// (rsync SST). A node can be killed with SIGKILL, as a crash would, and
// started again: its position is first recovered from InnoDB
// (--wsrep-recover) so that it rejoins with an incremental transfer (IST)
// from a donor's gcache instead of copying the whole data directory.
// `make cluster` runs the project on it; the node settings are the ones
// the README's "Running on a Galera cluster" section names.
package galera

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	// The nodes speak the MySQL protocol.
	_ "github.com/go-sql-driver/mysql"

	"github.com/taskserver/taskserver/internal/privatedb"
	"github.com/taskserver/taskserver/internal/procstat"
	"github.com/taskserver/taskserver/internal/projectrun"
)

// ErrUnavailable says a Galera cluster cannot be started here: mariadbd,
// mariadb-install-db, the Galera provider or rsync is missing
// (scripts/galera-up.sh installs them).
var ErrUnavailable = errors.New("galera: mariadbd, mariadb-install-db, the Galera provider (galera-4) or rsync is missing (scripts/galera-up.sh installs them)")

// providerPaths are where Debian's and the upstream packages put the
// Galera provider library.
var providerPaths = []string{
	"/usr/lib/galera/libgalera_smm.so",
	"/usr/lib/galera-4/libgalera_smm.so",
	"/usr/lib64/galera-4/libgalera_smm.so",
	"/usr/lib64/galera/libgalera_smm.so",
	"/usr/lib/libgalera_smm.so",
}

// ProviderPath is the Galera provider library's path, or ErrUnavailable.
func ProviderPath() (string, error) {
	for _, p := range providerPaths {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", ErrUnavailable
}

// Available reports whether a cluster can be started here.
func Available() bool {
	_, err := ProviderPath()
	_, rerr := exec.LookPath("rsync")
	return err == nil && rerr == nil && privatedb.Available()
}

// Options configures a cluster. Zero values mean the defaults.
type Options struct {
	// Nodes is the number of nodes; default 3.
	Nodes int
	// BufferPool is each node's innodb_buffer_pool_size; default "256M".
	BufferPool string
	// MaxConnections is each node's max_connections; default 500.
	MaxConnections int
	// GCacheSize is each node's gcache.size, the ring of recent write-sets
	// a donor serves an incremental transfer from: a node that was away
	// for longer than the gcache covers needs a full transfer. Default
	// "256M".
	GCacheSize string
	// ApplierThreads is wsrep_slave_threads, the threads that apply other
	// nodes' write-sets; default 2.
	ApplierThreads int
	// StartTimeout bounds how long one node's start (with its state
	// transfer and crash recovery) may take until it is Synced; default
	// 3 minutes.
	StartTimeout time.Duration
}

// Cluster is a Galera cluster started for one run.
type Cluster struct {
	dir   string
	opts  Options
	nodes []*Node
}

// Transfer is how a node got the cluster's state when it (re)joined.
type Transfer string

// The ways a node joins.
const (
	// TransferNone: the node bootstrapped the cluster, or its state was
	// already the cluster's.
	TransferNone Transfer = "none"
	// TransferIST: the missing write-sets were replayed from a donor's
	// gcache (incremental state transfer).
	TransferIST Transfer = "IST"
	// TransferSST: the whole data directory was copied from a donor
	// (state snapshot transfer).
	TransferSST Transfer = "SST"
)

// Node is one server of the cluster.
type Node struct {
	index int // 0-based
	name  string
	dir   string
	data  string
	port  int    // client port
	gport int    // group communication (gmcast.listen_addr)
	iport int    // IST receiver
	sport int    // SST receiver (rsync daemon)
	bin   string // mariadbd
	base  []string
	proc  *projectrun.Proc
	opts  Options

	mu       sync.Mutex
	deadCPU  float64 // CPU seconds of runs that ended
	lastJoin Transfer
	position string // recovered before the last restart
}

// Start installs fresh data directories under dir and starts the
// cluster: node 1 bootstraps it, the others join in turn. It returns once
// every node is Synced with the full cluster size.
func Start(ctx context.Context, dir string, o Options) (*Cluster, error) {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.BufferPool == "" {
		o.BufferPool = "256M"
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = 500
	}
	if o.GCacheSize == "" {
		o.GCacheSize = "256M"
	}
	if o.ApplierThreads <= 0 {
		o.ApplierThreads = 2
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 3 * time.Minute
	}
	// Ports are taken by other programs between our look and the server's
	// bind only rarely; a whole new attempt is simplest then.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var c *Cluster
		c, err = start(ctx, filepath.Join(dir, fmt.Sprintf("attempt%d", attempt)), o)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, errAddrInUse) {
			return nil, err
		}
	}
	return nil, err
}

// errAddrInUse says a node could not bind one of its ports.
var errAddrInUse = errors.New("port already in use")

func start(ctx context.Context, dir string, o Options) (*Cluster, error) {
	server, install, err := privatedb.Programs()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	provider, err := ProviderPath()
	if err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("rsync"); err != nil {
		return nil, ErrUnavailable
	}
	runAs, err := serverUser()
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(4 * o.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{dir: dir, opts: o}
	// A name of its own: a node of another cluster on this machine (another
	// test's) that comes to listen on one of our ports while its owner is
	// down is refused by name, not joined.
	var tag [4]byte
	if _, err := rand.Read(tag[:]); err != nil {
		return nil, err
	}
	clusterName := "taskserver-" + hex.EncodeToString(tag[:])
	var gcomm []string
	for i := 0; i < o.Nodes; i++ {
		gcomm = append(gcomm, fmt.Sprintf("127.0.0.1:%d", ports[4*i+1]))
	}
	for i := 0; i < o.Nodes; i++ {
		n := &Node{index: i, name: fmt.Sprintf("node%d", i+1), dir: filepath.Join(dir, fmt.Sprintf("node%d", i+1)),
			bin: server, port: ports[4*i], gport: ports[4*i+1], iport: ports[4*i+2], sport: ports[4*i+3], opts: o, lastJoin: TransferNone}
		n.data = filepath.Join(n.dir, "data")
		tmp := filepath.Join(n.dir, "tmp")
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return nil, fmt.Errorf("galera %s: %w", n.name, err)
		}
		if err := os.MkdirAll(n.data, 0o700); err != nil {
			return nil, fmt.Errorf("galera %s: %w", n.name, err)
		}
		if err := handOver(dir, n.dir, runAs); err != nil {
			return nil, fmt.Errorf("galera %s: %w", n.name, err)
		}
		// A joiner's data directory is the donor's copy (SST).
		if i == 0 {
			out, err := exec.CommandContext(ctx, install, "--no-defaults", "--datadir="+n.data, "--tmpdir="+tmp,
				"--auth-root-authentication-method=normal", "--skip-test-db", "--user="+runAs.Username).CombinedOutput()
			if err != nil {
				return nil, fmt.Errorf("%s: %w\n%s", filepath.Base(install), err, privatedb.Tail(out, 2000))
			}
		}
		n.base = []string{"--no-defaults", "--datadir=" + n.data, "--tmpdir=" + tmp,
			"--socket=" + filepath.Join(n.dir, "sock"), "--pid-file=" + filepath.Join(n.dir, "pid"),
			"--port=" + strconv.Itoa(n.port), "--bind-address=127.0.0.1", "--skip-name-resolve",
			"--user=" + runAs.Username, "--innodb-buffer-pool-size=" + o.BufferPool,
			"--max-connections=" + strconv.Itoa(o.MaxConnections),
			// What Galera needs of every node: row events, InnoDB only,
			// interleaved auto-increment locks (the applier threads insert
			// concurrently).
			"--binlog-format=ROW", "--default-storage-engine=InnoDB", "--innodb-autoinc-lock-mode=2",
			"--wsrep-on=ON", "--wsrep-provider=" + provider,
			"--wsrep-cluster-name=" + clusterName,
			"--wsrep-cluster-address=gcomm://" + strings.Join(gcomm, ","),
			"--wsrep-node-name=" + n.name,
			fmt.Sprintf("--wsrep-node-address=127.0.0.1:%d", n.gport),
			fmt.Sprintf("--wsrep-node-incoming-address=127.0.0.1:%d", n.port),
			fmt.Sprintf("--wsrep-provider-options=base_port=%d;gmcast.listen_addr=tcp://127.0.0.1:%d;ist.recv_addr=127.0.0.1:%d;gcache.size=%s",
				n.gport, n.gport, n.iport, o.GCacheSize),
			fmt.Sprintf("--wsrep-sst-receive-address=127.0.0.1:%d", n.sport),
			"--wsrep-sst-method=rsync",
			"--wsrep-slave-threads=" + strconv.Itoa(o.ApplierThreads),
		}
		n.proc = projectrun.New(projectrun.Spec{Name: "mariadbd", Bin: server, LogDir: n.dir})
		c.nodes = append(c.nodes, n)
	}
	for i, n := range c.nodes {
		args := append([]string(nil), n.base...)
		if i == 0 {
			args = append(args, "--wsrep-new-cluster")
		}
		tr, err := n.launch(ctx, args)
		if err != nil {
			// The donor's side of a failed transfer is in its log.
			var donors []byte
			for _, d := range c.nodes[:i] {
				log, _ := os.ReadFile(d.LogPath())
				donors = append(donors, fmt.Sprintf("\n--- %s's log ends:\n%s", d.name, privatedb.Tail(log, 2000))...)
			}
			c.Stop()
			return nil, fmt.Errorf("galera %s: %w%s", n.name, err, donors)
		}
		n.setJoin(tr, "")
	}
	for _, n := range c.nodes {
		if err := n.WaitSynced(ctx, o.Nodes); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// Nodes are the cluster's nodes, node 1 first.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node is node i (0-based).
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// DSNs are the nodes' DSNs with no database, node 1 first.
func (c *Cluster) DSNs() []string {
	var d []string
	for _, n := range c.nodes {
		d = append(d, n.DSN())
	}
	return d
}

// Stop shuts every node down and removes the cluster's directory.
func (c *Cluster) Stop() {
	// The last node standing has the newest state; the order matters to
	// no one here, as the directory goes.
	for i := len(c.nodes) - 1; i >= 0; i-- {
		_ = c.nodes[i].proc.Stop(time.Minute)
	}
	_ = os.RemoveAll(c.dir)
}

// Name is the node's name, node1…nodeN.
func (n *Node) Name() string { return n.name }

// DSN is the node's DSN with no database: root@tcp(127.0.0.1:PORT)/.
func (n *Node) DSN() string { return fmt.Sprintf("root@tcp(127.0.0.1:%d)/", n.port) }

// LogPath is the node's error log, kept across restarts.
func (n *Node) LogPath() string { return n.proc.LogPath() }

// PID is the node's server process id; 0 while it is down.
func (n *Node) PID() int { return n.proc.PID() }

// Running reports whether the node's server process is up.
func (n *Node) Running() bool { return n.proc.Running() }

// CPUSeconds is the CPU time the node's server processes have used in
// all their runs so far: the database's share of a run's cost on this
// node.
func (n *Node) CPUSeconds() float64 {
	n.mu.Lock()
	dead := n.deadCPU
	n.mu.Unlock()
	if pid := n.PID(); pid > 0 {
		if u, err := procstat.Read(pid); err == nil {
			return dead + u.CPUSeconds
		}
	}
	return dead
}

// LastJoin is how the node got the cluster's state at its last start,
// and the position recovered before it ("" at the first start).
func (n *Node) LastJoin() (Transfer, string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lastJoin, n.position
}

func (n *Node) setJoin(t Transfer, pos string) {
	n.mu.Lock()
	n.lastJoin, n.position = t, pos
	n.mu.Unlock()
}

// Kill kills the node's server with SIGKILL, as a crash would, and waits
// for it. The others go on as a cluster of N-1 (a majority of 3).
func (n *Node) Kill() {
	pid := n.PID()
	var u procstat.Usage
	if pid > 0 {
		u, _ = procstat.Read(pid)
	}
	n.proc.Kill()
	n.mu.Lock()
	n.deadCPU += u.CPUSeconds
	n.mu.Unlock()
}

// Restart starts a killed (or stopped) node again so that it rejoins the
// cluster: its last committed position is recovered from InnoDB first
// (mariadbd --wsrep-recover), and it starts from there
// (--wsrep-start-position), so a donor whose gcache still holds the
// write-sets since sends only those (IST). It returns how the node got
// the state once it is Synced.
func (n *Node) Restart(ctx context.Context) (Transfer, error) {
	if n.proc.Running() {
		return "", fmt.Errorf("restart %s: still running", n.name)
	}
	pos, err := n.recover(ctx)
	if err != nil {
		return "", err
	}
	args := append(append([]string(nil), n.base...), "--wsrep-start-position="+pos)
	tr, err := n.launch(ctx, args)
	if err != nil {
		return "", fmt.Errorf("restart %s: %w", n.name, err)
	}
	n.setJoin(tr, pos)
	return tr, nil
}

// recoveredRE is the line --wsrep-recover writes with the position InnoDB
// committed last.
var recoveredRE = regexp.MustCompile(`WSREP: Recovered position:?\s+([0-9a-f-]{36}:-?[0-9]+)`)

// recover runs mariadbd --wsrep-recover on the node's data directory,
// which replays InnoDB's redo log and prints the last committed
// write-set's position, and returns it as uuid:seqno.
func (n *Node) recover(ctx context.Context) (string, error) {
	logPath := filepath.Join(n.dir, "recover.log")
	_ = os.Remove(logPath)
	args := append(append([]string(nil), n.base...), "--wsrep-recover", "--log-error="+logPath)
	rctx, cancel := context.WithTimeout(ctx, n.opts.StartTimeout)
	defer cancel()
	out, err := exec.CommandContext(rctx, n.bin, args...).CombinedOutput()
	log, _ := os.ReadFile(logPath)
	log = append(log, out...)
	if err != nil {
		return "", fmt.Errorf("%s --wsrep-recover: %w\n%s", n.name, err, privatedb.Tail(log, 2000))
	}
	m := recoveredRE.FindAllSubmatch(log, -1)
	if len(m) == 0 {
		return "", fmt.Errorf("%s --wsrep-recover printed no position:\n%s", n.name, privatedb.Tail(log, 2000))
	}
	return string(m[len(m)-1][1]), nil
}

// launch starts the node's server with args and waits until it answers
// and is Synced; it returns how the node got its state, read from this
// start's part of its log.
func (n *Node) launch(ctx context.Context, args []string) (Transfer, error) {
	var logStart int64
	if fi, err := os.Stat(n.LogPath()); err == nil {
		logStart = fi.Size()
	}
	n.proc.SetArgs(args)
	if err := n.proc.Start(); err != nil {
		return "", err
	}
	thisStart := func() []byte {
		log, _ := os.ReadFile(n.LogPath())
		if int64(len(log)) < logStart {
			return nil
		}
		return log[logStart:]
	}
	deadline := time.Now().Add(n.opts.StartTimeout)
	for {
		st, err := n.Status(ctx)
		if err == nil && st.State == "Synced" {
			return transferOf(thisStart()), nil
		}
		if err == nil {
			err = fmt.Errorf("state %s", st.State)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.proc.Kill()
			return "", fmt.Errorf("did not become Synced: %w\n%s", errors.Join(err, ctx.Err()), privatedb.Tail(thisStart(), 3000))
		}
		select {
		case <-n.proc.Done():
			log := thisStart()
			if bytes.Contains(log, []byte("Address already in use")) {
				return "", fmt.Errorf("%s: %w", n.name, errAddrInUse)
			}
			return "", fmt.Errorf("exited at start:\n%s", privatedb.Tail(log, 3000))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// transferOf reads how a joiner got its state from its log. The joiner
// always starts its SST script and an IST receiver, since it cannot know
// what the donor will choose; the script then says which it got ("rsync
// SST completed on joiner" for a copy, "rsync IST completed on joiner"
// when the donor bypassed the copy), and "IST received" follows write-sets
// replayed from the donor's gcache.
func transferOf(log []byte) Transfer {
	switch {
	case sstDoneRE.Match(log):
		return TransferSST
	case istDoneRE.Match(log) || bytes.Contains(log, []byte("IST received")):
		return TransferIST
	}
	return TransferNone
}

var (
	sstDoneRE = regexp.MustCompile(`WSREP_SST: \[INFO\] \w+ SST completed on joiner`)
	istDoneRE = regexp.MustCompile(`WSREP_SST: \[INFO\] \w+ IST completed on joiner`)
)

// Status is a node's view of the cluster.
type Status struct {
	// ClusterSize is wsrep_cluster_size: nodes in the primary component.
	ClusterSize int
	// State is wsrep_local_state_comment: Synced, Joining, Donor/Desynced…
	State string
	// Ready is wsrep_ready: the node accepts queries.
	Ready bool
	// CertFailures is wsrep_local_cert_failures: this node's transactions
	// that lost certification against another node's (error 1213).
	CertFailures int64
	// BFAborts is wsrep_local_bf_aborts: this node's local transactions
	// aborted by a replicated write-set applied over them (error 1213).
	BFAborts int64
	// LastCommitted is wsrep_last_committed, the seqno applied last.
	LastCommitted int64
}

// Status reads the node's wsrep status variables.
func (n *Node) Status(ctx context.Context) (Status, error) {
	var st Status
	db, err := sql.Open("mysql", n.DSN())
	if err != nil {
		return st, err
	}
	defer db.Close()
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := db.QueryContext(qctx, "SHOW GLOBAL STATUS LIKE 'wsrep%'")
	if err != nil {
		return st, err
	}
	defer rows.Close()
	v := map[string]string{}
	for rows.Next() {
		var k, val string
		if err := rows.Scan(&k, &val); err != nil {
			return st, err
		}
		v[strings.ToLower(k)] = val
	}
	if err := rows.Err(); err != nil {
		return st, err
	}
	st.ClusterSize, _ = strconv.Atoi(v["wsrep_cluster_size"])
	st.State = v["wsrep_local_state_comment"]
	st.Ready = v["wsrep_ready"] == "ON"
	st.CertFailures, _ = strconv.ParseInt(v["wsrep_local_cert_failures"], 10, 64)
	st.BFAborts, _ = strconv.ParseInt(v["wsrep_local_bf_aborts"], 10, 64)
	st.LastCommitted, _ = strconv.ParseInt(v["wsrep_last_committed"], 10, 64)
	// The port is free while the node is down, and another server (another
	// test's) may take it: its answers would say a restart succeeded that
	// failed to bind.
	var datadir string
	if err := db.QueryRowContext(qctx, "SELECT @@datadir").Scan(&datadir); err != nil {
		return st, err
	}
	want := n.data
	if real, err := filepath.EvalSymlinks(want); err == nil {
		want = real // the server reports its data directory resolved
	}
	if filepath.Clean(datadir) != filepath.Clean(want) {
		return Status{}, fmt.Errorf("galera %s: 127.0.0.1:%d is answered by another server (data directory %s)", n.name, n.port, datadir)
	}
	return st, nil
}

// WaitSynced waits until the node is Synced in a primary component of at
// least size nodes.
func (n *Node) WaitSynced(ctx context.Context, size int) error {
	deadline := time.Now().Add(n.opts.StartTimeout)
	for {
		st, err := n.Status(ctx)
		if err == nil && st.State == "Synced" && st.ClusterSize >= size {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("galera %s: not Synced in a cluster of %d: %+v, %w", n.name, size, st, errors.Join(err, ctx.Err()))
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// serverUser is the user the nodes run as: the current one, or mysql
// when that is root. A joiner's rsync SST starts an rsync daemon as the
// server's user, and an rsync daemon started by root switches to nobody,
// who may not write the data directory: a root-run node can never
// receive a full transfer.
func serverUser() (*user.User, error) {
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("current user: %w", err)
	}
	if u.Uid != "0" {
		return u, nil
	}
	m, err := user.Lookup("mysql")
	if err != nil {
		return nil, fmt.Errorf("galera: running as root, the nodes run as user mysql (rsync SST cannot run as root), which does not exist: %w", err)
	}
	return m, nil
}

// handOver gives the node's directory to the server's user and makes the
// cluster's directory traversable, when the server runs as someone else
// than us.
func handOver(clusterDir, nodeDir string, u *user.User) error {
	cur, err := user.Current()
	if err != nil || cur.Uid == u.Uid {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for d := nodeDir; ; d = filepath.Dir(d) {
		// Every directory up from the node's must let its user through.
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if !strings.HasPrefix(d, clusterDir) && d != filepath.Dir(clusterDir) {
				return fmt.Errorf("galera: the nodes run as %s, who cannot enter %s: give the cluster a directory they can reach", u.Username, d)
			}
			if err := os.Chmod(d, fi.Mode().Perm()|0o711); err != nil {
				return err
			}
		}
		if d == "/" || d == "." {
			break
		}
	}
	return filepath.WalkDir(nodeDir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

// freePorts returns n distinct loopback ports that were free a moment
// ago: all are held open together so none is handed out twice.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
