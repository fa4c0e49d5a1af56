package config

import (
	"fmt"
	"net"
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
type DaemonSpec struct {
	Program  string   `yaml:"program"`
	Replicas int      `yaml:"replicas"`
	Listen   string   `yaml:"listen"`
	Args     []string `yaml:"args"`
}

// Replica is one process the supervisor runs for a DaemonSpec.
type Replica struct {
	// Name is the program name, with "@<index>" when the daemon has more
	// than one replica: "validator@1".
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
		if seen[d.Program] {
			return nil, fmt.Errorf("daemons[%d]: %s is listed twice (use replicas)", i, d.Program)
		}
		seen[d.Program] = true
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
		r := Replica{Name: d.Program, Program: d.Program, Index: i, Replicas: n}
		if n > 1 {
			r.Name = d.Program + "@" + strconv.Itoa(i)
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
