// Package examples holds only this test: the examples are a module of their
// own, as a project's repository is, and must build from the server's
// public packages alone.
package examples

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoInternalImports fails on any import of an internal package. Go's
// own rule does not stop it here, since this module's path lies inside
// the server's; a project's repository would not compile with one.
func TestNoInternalImports(t *testing.T) {
	t.Parallel()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.Contains("/"+p+"/", "/internal/") {
				t.Errorf("%s imports %s: an example may use only the public API", path, p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
