package supervisor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/taskserver/taskserver/internal/config"
)

// TestExampleConfigDaemons keeps deploy/project.yaml.example's commented
// daemons list valid: uncommented, it parses, names only programs that
// exist under cmd/, and gives every replica its own listen address.
func TestExampleConfigDaemons(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/project.yaml.example")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "\n#daemons:")
	if i < 0 {
		t.Fatal("deploy/project.yaml.example has no commented daemons list (#daemons:)")
	}
	var lines []string
	for _, l := range strings.Split(text[i+1:], "\n") {
		if !strings.HasPrefix(l, "#") {
			break
		}
		lines = append(lines, strings.TrimPrefix(l, "#"))
	}
	specs, err := config.Daemons([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("the example's daemons list: %v", err)
	}
	if len(specs) < 7 {
		t.Errorf("the example lists %d programs, want every daemon", len(specs))
	}
	seen := map[string]string{"127.0.0.1:9100": "the supervisor"}
	for _, s := range specs {
		if _, err := os.Stat(filepath.Join("../../cmd", s.Program, "main.go")); err != nil {
			t.Errorf("the example runs %s, which is no program under cmd/: %v", s.Program, err)
		}
		for _, r := range s.Expand() {
			if r.Listen == "" {
				t.Errorf("%s has no listen address: its metrics would be at the program's default, shared by replicas", r.Name)
			} else if other, ok := seen[r.Listen]; ok {
				t.Errorf("%s and %s both listen on %s", r.Name, other, r.Listen)
			}
			seen[r.Listen] = r.Name
		}
	}
}
