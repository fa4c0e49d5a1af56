package boincconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/taskserver/taskserver/internal/config"
	"github.com/taskserver/taskserver/internal/planclass"
)

// Options are Convert's inputs.
type Options struct {
	// OldDir is the BOINC project directory holding config.xml (and
	// maybe config_aux.xml and plan_class_spec.xml). Required.
	OldDir string
	// ProjectDir is the new project's directory: project-dir in the file,
	// and where plan_class_spec.xml is copied. Required; created if
	// missing.
	ProjectDir string
	// Out is the project file to write. Required.
	Out string
	// DBDSN is the database the import fills (db-dsn); empty: the old
	// one's, which the report says to change.
	DBDSN string
	// Force overwrites Out and a plan_class_spec.xml already in
	// ProjectDir; without it either existing is an error and nothing is
	// written.
	Force bool
	// DryRun reads, converts and checks everything, and writes nothing.
	DryRun bool
}

// Result is what Convert did, or would do in a dry run.
type Result struct {
	Report *Report
	// File is the project file's contents.
	File []byte
}

// ErrExists is returned when Out or the plan class copy exists and
// Options.Force is not set.
var ErrExists = errors.New("file exists (use --force to overwrite)")

// Convert reads the old project's configuration, writes the project file
// (mode 0600: it holds the database password) and, when the old project
// has plan classes that parse, their copy; it returns the report and the
// file. Each file is written whole or not at all. Nothing is written when
// anything fails to parse, or in a dry run.
func Convert(o Options) (*Result, error) {
	var errs []error
	if o.OldDir == "" {
		errs = append(errs, errors.New("the old project directory is missing"))
	}
	if o.ProjectDir == "" {
		errs = append(errs, errors.New("the new project directory is missing"))
	}
	if o.Out == "" {
		errs = append(errs, errors.New("the project file to write is missing"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	oldDir, err := filepath.Abs(o.OldDir)
	if err != nil {
		return nil, err
	}
	newDir, err := filepath.Abs(o.ProjectDir)
	if err != nil {
		return nil, err
	}
	body, err := os.ReadFile(filepath.Join(oldDir, "config.xml"))
	if err != nil {
		return nil, fmt.Errorf("old project: %w", err)
	}
	cfg, err := ParseConfig(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(oldDir, "config.xml"), err)
	}
	in := Input{Config: cfg, OldDir: oldDir, ProjectDir: newDir, DBDSN: o.DBDSN}
	if in.Aux, err = readAux(filepath.Join(oldDir, "config_aux.xml")); err != nil {
		return nil, err
	}
	specPath := filepath.Join(oldDir, PlanClassFile)
	spec, err := os.ReadFile(specPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("old project: %w", err)
	default:
		if in.PlanClasses, err = planclass.Parse(bytes.NewReader(spec)); err != nil {
			return nil, fmt.Errorf("%s: %w", specPath, err)
		}
	}
	if v, ok := cfg.Lookup("key_dir"); ok {
		dir := v
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(oldDir, dir)
		}
		if p := filepath.Join(dir, "code_sign_private"); fileExists(p) {
			in.CodeSignPrivate = p
		}
	}
	proj, rep, err := Translate(in)
	if err != nil {
		return nil, err
	}
	file, err := Render(proj, filepath.Join(oldDir, "config.xml"))
	if err != nil {
		return nil, err
	}
	specOut := filepath.Join(newDir, PlanClassFile)
	if !o.Force {
		for _, p := range []string{o.Out, specOut} {
			if p == specOut && in.PlanClasses == nil {
				continue
			}
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("%s: %w", p, ErrExists)
			}
		}
	}
	res := &Result{Report: rep, File: file}
	if o.DryRun {
		return res, nil
	}
	if err := os.MkdirAll(newDir, 0o755); err != nil {
		return nil, fmt.Errorf("new project directory: %w", err)
	}
	if in.PlanClasses != nil {
		if err := writeAtomic(specOut, spec, 0o644, o.Force); err != nil {
			return nil, err
		}
	}
	if err := writeAtomic(o.Out, file, 0o600, o.Force); err != nil {
		return nil, err
	}
	return res, nil
}

// readAux reads config_aux.xml, nil when there is none.
func readAux(path string) (*Aux, error) {
	body, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("old project: %w", err)
	}
	a, err := ParseAux(body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// writeAtomic writes body to path through a temporary file in the same
// directory, synced before it takes path's name, so a reader (or a crash)
// sees the old file or the new one, never part of it. Without force an
// existing path is left alone: the name is taken with a hard link, which
// fails if it exists, rather than a rename, which would replace it.
func writeAtomic(path string, body []byte, mode os.FileMode, force bool) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(body)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if force {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", path, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("write %s: sync directory: %w", path, err)
		}
	}
	return nil
}

// Render writes the project file: a comment naming the source, each
// setting with the BOINC option it came from, then the daemons list with
// the commands each entry replaces.
func Render(p *Project, source string) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	root.HeadComment = "Converted from " + source + " by taskctl import boinc.\n" +
		"Keys are the programs' flag names (see deploy/project.yaml.example); a flag or a\n" +
		"TASKSERVER_<NAME> environment variable overrides the file. The conversion's report\n" +
		"lists every old option, and what became of it."
	for _, s := range p.Settings {
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: s.Key}
		v := &yaml.Node{}
		if err := v.Encode(s.Value); err != nil {
			return nil, fmt.Errorf("render %s: %w", s.Key, err)
		}
		if s.From != "" {
			k.LineComment = "from " + s.From
		}
		root.Content = append(root.Content, k, v)
	}
	if len(p.Daemons) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for _, d := range p.Daemons {
			n := &yaml.Node{}
			if err := n.Encode(d.Spec); err != nil {
				return nil, fmt.Errorf("render daemons: %w", err)
			}
			if len(d.From) > 0 {
				n.HeadComment = "BOINC: " + strings.Join(d.From, "\n       ")
			}
			list.Content = append(list.Content, n)
		}
		k := &yaml.Node{Kind: yaml.ScalarNode, Value: config.DaemonsKey,
			HeadComment: "The daemons `supervisor run|start` runs, in this order."}
		root.Content = append(root.Content, k, list)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return b.Bytes(), nil
}
