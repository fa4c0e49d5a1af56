package config

import (
	"fmt"
	"net"
	"regexp"
	"strconv"

	"gopkg.in/yaml.v3"
)

// DaemonsKey is the configuration file's one non-scalar key: the list of
// daemons the supervisor runs. Programs other than the supervisor and the
// status page skip it.
const DaemonsKey = "daemons"

// DaemonSpec is one entry of the configuration file's daemons list:
//
//	daemons:
//	  - program: validator          # program name, a binary in the bin directory
//	    replicas: 2                 # --mod; replica i runs with --mod-index i
//	    listen: 127.0.0.1:9104      # replica i serves /metrics on port+i
//	    args: ["--app", "demo"]     # extra flags for every replica
//	  - program: validator
//	    name: validator-einstein    # a second validator, for another app
//	    args: ["--app", "einstein"]
type DaemonSpec struct {
	Program string `yaml:"program"`
	// Name tells apart two entries of one program (a validator per app);
	// it names the replicas, their log files and status lines. Empty: the
	// program's name.
	Name     string   `yaml:"name,omitempty"`
	Replicas int      `yaml:"replicas,omitempty"`
	Listen   string   `yaml:"listen,omitempty"`
	Args     []string `yaml:"args,omitempty"`
}

// daemonName is what a daemon's name may be: it becomes a file name
// (<project-dir>/log/<name>.log), and "@" separates a replica's index.
var daemonName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// Replica is one process the supervisor runs for a DaemonSpec.
type Replica struct {
	// Name is the daemon's name (DaemonSpec.Name, else its program), with
	// "@<index>" when the daemon has more than one replica: "validator@1".
	Name     string
	Program  string
	Index    int
	Replicas int
	// Listen is this replica's /metrics and /healthz address (empty when
	// the spec has none: the program's default).
	Listen string
	Args   []string
}

// Daemons reads the daemons list from a configuration file's contents. A
// file without one yields none.
func Daemons(body []byte) ([]DaemonSpec, error) {
	var raw struct {
		Daemons []DaemonSpec `yaml:"daemons"`
	}
	if err := yaml.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	seen := map[string]bool{}
	for i := range raw.Daemons {
		d := &raw.Daemons[i]
		if d.Program == "" {
			return nil, fmt.Errorf("daemons[%d]: program is missing", i)
		}
		name := d.name()
		if !daemonName.MatchString(name) {
			return nil, fmt.Errorf("daemons[%d]: name %q: want letters, digits, '_', '.' and '-'", i, name)
		}
		if seen[name] {
			if d.Name == "" {
				return nil, fmt.Errorf("daemons[%d]: %s is listed twice (use replicas, or give each entry its own name)", i, name)
			}
			return nil, fmt.Errorf("daemons[%d]: name %s is used twice", i, name)
		}
		seen[name] = true
		if d.Replicas == 0 {
			d.Replicas = 1
		}
		if d.Replicas < 0 {
			return nil, fmt.Errorf("daemons[%d] %s: replicas %d: want at least 1", i, d.Program, d.Replicas)
		}
		if d.Listen != "" {
			if _, port, err := net.SplitHostPort(d.Listen); err != nil {
				return nil, fmt.Errorf("daemons[%d] %s: listen %q: %w", i, d.Program, d.Listen, err)
			} else if p, err := strconv.Atoi(port); err != nil || p <= 0 || p+d.Replicas-1 > 65535 {
				return nil, fmt.Errorf("daemons[%d] %s: listen %q: want a numeric port with room for %d replicas", i, d.Program, d.Listen, d.Replicas)
			}
		}
	}
	return raw.Daemons, nil
}

// Expand returns the processes the spec stands for: one Replica per
// --mod-index, each with its own listen port (the spec's port plus the
// index). Args carry --mod and --mod-index only when there is more than one
// replica, so programs that take no --mod (the scheduler) can run as one.
func (d DaemonSpec) Expand() []Replica {
	n := max(d.Replicas, 1)
	out := make([]Replica, 0, n)
	for i := range n {
		r := Replica{Name: d.name(), Program: d.Program, Index: i, Replicas: n}
		if n > 1 {
			r.Name += "@" + strconv.Itoa(i)
		}
		if d.Listen != "" {
			host, port, _ := net.SplitHostPort(d.Listen)
			p, _ := strconv.Atoi(port)
			r.Listen = net.JoinHostPort(host, strconv.Itoa(p+i))
		}
		r.Args = append(r.Args, d.Args...)
		if n > 1 {
			r.Args = append(r.Args, "--"+FlagMod, strconv.Itoa(n), "--"+FlagModIndex, strconv.Itoa(i))
		}
		if r.Listen != "" {
			r.Args = append(r.Args, "--"+FlagListen, r.Listen)
		}
		out = append(out, r)
	}
	return out
}

// name is the spec's name: Name, or else the program's.
func (d DaemonSpec) name() string {
	if d.Name != "" {
		return d.Name
	}
	return d.Program
}
