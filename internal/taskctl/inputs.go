package taskctl

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/jobs"
)

// sharedPrefix marks an --input naming a shared file (taskctl file stage).
const sharedPrefix = "shared:"

// inputList is a job's input files in command-line order: --input and
// --remote-file add to one list, as create_work's file names and its
// --remote_file do, because the order is the input template's.
type inputList struct {
	args []inputArg
}

// inputArg is one input file: a local file to read (path; "-" is standard
// input), or a shared or remote file (in).
type inputArg struct {
	path string
	in   jobs.Input
}

// add reads one --input: shared:NAME, "-" or a path.
func (l *inputList) add(s string) error {
	switch {
	case strings.HasPrefix(s, sharedPrefix):
		name := strings.TrimPrefix(s, sharedPrefix)
		if name == "" {
			return errors.New("--input shared:NAME: the name is empty")
		}
		l.args = append(l.args, inputArg{in: jobs.Input{Shared: name}})
	case s == "":
		return errors.New("--input: empty; want a file, - (standard input) or shared:NAME")
	default:
		l.args = append(l.args, inputArg{path: s})
	}
	return nil
}

// addRemote reads one --remote-file URL,NBYTES,MD5 (create_work's
// --remote_file URL NBYTES MD5). The URL may hold commas; the last two
// fields are the size and md5. Package jobs checks the values.
func (l *inputList) addRemote(s string) error {
	i := strings.LastIndexByte(s, ',')
	j := -1
	if i > 0 {
		j = strings.LastIndexByte(s[:i], ',')
	}
	if j <= 0 {
		return fmt.Errorf("--remote-file %q: want URL,NBYTES,MD5", s)
	}
	n, err := strconv.ParseFloat(s[j+1:i], 64)
	if err != nil {
		return fmt.Errorf("--remote-file %q: NBYTES %q: want a number of bytes", s, s[j+1:i])
	}
	l.args = append(l.args, inputArg{in: jobs.Input{URL: s[:j], Nbytes: n, MD5: s[i+1:]}})
	return nil
}

// load reads the local files and returns the job's inputs. A missing file
// is an error before anything is staged.
func (l *inputList) load(stdin io.Reader) ([]jobs.Input, error) {
	out := make([]jobs.Input, 0, len(l.args))
	for _, a := range l.args {
		if a.path == "" {
			out = append(out, a.in)
			continue
		}
		var data []byte
		var err error
		if a.path == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(a.path)
		}
		if err != nil {
			return nil, fmt.Errorf("read --input: %w", err)
		}
		if data == nil {
			data = []byte{} // an empty file is still a file's content
		}
		out = append(out, jobs.Input{Data: data})
	}
	return out, nil
}

// firstPath is the first local file of the list ("" if none).
func (l *inputList) firstPath() string {
	for _, a := range l.args {
		if a.path != "" && a.path != "-" {
			return a.path
		}
	}
	return ""
}

func (l *inputList) String() string { return "" }

// inputValue and remoteValue are the flag values of --input and
// --remote-file; both add to one inputList.
type (
	inputValue  struct{ l *inputList }
	remoteValue struct{ l *inputList }
)

func (v inputValue) Set(s string) error  { return v.l.add(s) }
func (v inputValue) String() string      { return "" }
func (v remoteValue) Set(s string) error { return v.l.addRemote(s) }
func (v remoteValue) String() string     { return "" }

// inputFlags are job submit's file flags, filling l in command-line order.
func inputFlags(l *inputList) []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "input", Value: inputValue{l}, Usage: "an input file of the job, in the input template's " +
			"order (repeatable): a local file, - for standard input, or shared:NAME for a file staged with taskctl file stage"},
		&cli.GenericFlag{Name: "remote-file", Aliases: []string{"remote_file"}, Value: remoteValue{l},
			Usage: "URL,NBYTES,MD5: an input file kept on another server, in order among the --input files (repeatable)"},
	}
}

// templateFlags are the job's own templates, with create_work's names as
// aliases.
func templateFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "input-template", Aliases: []string{"wu-template", "wu_template"},
			Usage: "input template file (BOINC's format; default: the app's, see taskctl app templates)"},
		&cli.StringFlag{Name: "output-template", Aliases: []string{"result-template", "result_template"},
			Usage: "output template file (BOINC's format; default: the app's)"},
		&cli.StringFlag{Name: "command-line", Aliases: []string{"command_line"},
			Usage: "the application's command line (replaces the input template's; in a batch it goes before each job's own)"},
	}
}

// readTemplates reads the files --input-template and --output-template
// name; empty means the app's.
func readTemplates(c *cli.Context) (in, out string, err error) {
	read := func(flag string) (string, error) {
		path := c.String(flag)
		if path == "" {
			return "", nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("--%s: %w", flag, err)
		}
		if len(strings.TrimSpace(string(b))) == 0 {
			return "", fmt.Errorf("--%s %s: empty file", flag, path)
		}
		return string(b), nil
	}
	if in, err = read("input-template"); err != nil {
		return "", "", err
	}
	out, err = read("output-template")
	return in, out, err
}

// jobLine is one job of a jobs file: create_work's --stdin line.
type jobLine struct {
	name, commandLine string
	inputs            inputList
}

// parseJobLine reads one line of a jobs file: [--name N] [--command-line X]
// [--remote-file URL,NBYTES,MD5] [--input shared:NAME] FILE... in any
// order, quoted as a shell would ('...' or "..."); create_work's
// underscore spellings (--wu_name, --command_line, --remote_file) work too.
func parseJobLine(line string) (jobLine, error) {
	words, err := splitWords(line)
	if err != nil {
		return jobLine{}, err
	}
	var j jobLine
	fs := flag.NewFlagSet("job", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for _, n := range []string{"name", "wu-name", "wu_name"} {
		fs.StringVar(&j.name, n, "", "")
	}
	for _, n := range []string{"command-line", "command_line"} {
		fs.StringVar(&j.commandLine, n, "", "")
	}
	for _, n := range []string{"remote-file", "remote_file"} {
		fs.Var(remoteValue{&j.inputs}, n, "")
	}
	fs.Var(inputValue{&j.inputs}, "input", "")
	// A file name ends the flag package's parse; go on after it, so flags
	// and files mix in order.
	for len(words) > 0 {
		if err := fs.Parse(words); err != nil {
			return j, err
		}
		words = fs.Args()
		if len(words) > 0 {
			if err := j.inputs.add(words[0]); err != nil {
				return j, err
			}
			words = words[1:]
		}
	}
	return j, nil
}

// splitWords splits s into words at blanks; '...' and "..." quote (no
// escapes inside '...'; \" and \\ inside "...").
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'' || c == '"':
			inWord = true
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if c == '"' && s[j] == '\\' && j+1 < len(s) && (s[j+1] == '"' || s[j+1] == '\\') {
					j++
				}
				cur.WriteByte(s[j])
			}
			if j == len(s) {
				return nil, fmt.Errorf("unclosed %c", c)
			}
			i = j
		default:
			inWord = true
			cur.WriteByte(c)
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
