package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestDaemonsExpand(t *testing.T) {
	body := []byte(`
db-dsn: "x"
daemons:
  - program: scheduler
    listen: 127.0.0.1:8080
  - program: validator
    replicas: 2
    listen: 127.0.0.1:9104
    args: ["--app", "demo"]
`)
	specs, err := Daemons(body)
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 2 {
		t.Fatalf("got %d specs", len(specs))
	}
	got := specs[1].Expand()
	want := []Replica{
		{Name: "validator@0", Program: "validator", Index: 0, Replicas: 2, Listen: "127.0.0.1:9104",
			Args: []string{"--app", "demo", "--mod", "2", "--mod-index", "0", "--listen", "127.0.0.1:9104"}},
		{Name: "validator@1", Program: "validator", Index: 1, Replicas: 2, Listen: "127.0.0.1:9105",
			Args: []string{"--app", "demo", "--mod", "2", "--mod-index", "1", "--listen", "127.0.0.1:9105"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Expand:\n got %+v\nwant %+v", got, want)
	}
	one := specs[0].Expand()
	if len(one) != 1 || one[0].Name != "scheduler" || strings.Contains(strings.Join(one[0].Args, " "), "--mod") {
		t.Fatalf("single replica: %+v", one)
	}
	// The other programs read the same file and skip the list.
	values, err := Parse(body)
	if err != nil || values["db-dsn"] != "x" {
		t.Fatalf("Parse: %v %v", values, err)
	}
	if _, ok := values[DaemonsKey]; ok {
		t.Fatal("Parse kept the daemons list")
	}
}

func TestDaemonsRejects(t *testing.T) {
	for name, body := range map[string]string{
		"no program": "daemons:\n  - replicas: 1\n",
		"twice":      "daemons:\n  - program: a\n  - program: a\n",
		"name twice": "daemons:\n  - program: a\n    name: x\n  - program: b\n    name: x\n",
		"name clash": "daemons:\n  - program: a\n  - program: b\n    name: a\n",
		"name path":  "daemons:\n  - program: a\n    name: ../a\n",
		"name at":    "daemons:\n  - program: a\n    name: a@1\n",
		"negative":   "daemons:\n  - program: a\n    replicas: -1\n",
		"bad listen": "daemons:\n  - program: a\n    listen: nowhere\n",
		"port range": "daemons:\n  - program: a\n    replicas: 3\n    listen: 127.0.0.1:65534\n",
	} {
		if _, err := Daemons([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A multi-app project runs one validator per app: each entry of the same
// program has its own name, which names its replicas (and so their log
// files and status lines) while the program stays the binary run.
func TestDaemonsNamedEntriesOfOneProgram(t *testing.T) {
	t.Parallel()
	body := []byte(`
daemons:
  - program: validator
    name: validator-a
    args: ["--app", "a"]
  - program: validator
    name: validator-b
    replicas: 2
    args: ["--app", "b"]
`)
	specs, err := Daemons(body)
	if err != nil {
		t.Fatalf("Daemons: %v", err)
	}
	var got []string
	for _, s := range specs {
		for _, r := range s.Expand() {
			if r.Program != "validator" {
				t.Errorf("replica %s: program %q, want validator", r.Name, r.Program)
			}
			got = append(got, r.Name)
		}
	}
	want := []string{"validator-a", "validator-b@0", "validator-b@1"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("replica names = %v, want %v", got, want)
	}
}
