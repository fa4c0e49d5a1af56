package taskctl

import (
	"bytes"
	"crypto/md5"
	"crypto/rsa"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/taskserver/taskserver/internal/appversion"
	"github.com/taskserver/taskserver/internal/fanout"
	"github.com/taskserver/taskserver/internal/keys"
)

// versionFile is one --file of app-version add, read and described.
type versionFile struct {
	path string
	data []byte
	f    appversion.File
}

// describeFiles reads the version's files and describes them; the first is
// the main program. Only the main program is run from the project
// directory; other files (data, libraries) are copied into the slot under
// their base name, so a program without the BOINC API can open them.
func describeFiles(paths []string, app string, versionNum int, platform string) ([]versionFile, error) {
	var out []versionFile
	bases := map[string]bool{}
	for i, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read --file: %w", err)
		}
		base := filepath.Base(p)
		if bases[base] {
			return nil, fmt.Errorf("--file %s: two files named %s", p, base)
		}
		bases[base] = true
		main := i == 0
		sum := md5.Sum(data)
		f := appversion.File{Name: appversion.FileName(app, versionNum, platform, base, main),
			Nbytes: float64(len(data)), MD5: hex.EncodeToString(sum[:]), MainProgram: main}
		if !main {
			f.OpenName, f.CopyFile = base, true
		}
		if err := fanout.ValidName(f.Name); err != nil {
			return nil, fmt.Errorf("--file %s: %w", p, err)
		}
		out = append(out, versionFile{path: p, data: data, f: f})
	}
	return out, nil
}

// signFiles fills in each file's signature, made here with the private key
// at keyPath or taken from the offline signatures file at sigPath, and checks
// every signature against the project's public key when pubPath exists: a
// signature the clients cannot check makes every task of the version fail.
func (t *tool) signFiles(files []versionFile, keyPath, sigPath, pubPath string) error {
	switch {
	case keyPath != "" && sigPath != "":
		return errors.New("give either --code-sign-key or --signatures, not both")
	case keyPath != "":
		k, err := keys.ReadPrivateFile(keyPath)
		if err != nil {
			return fmt.Errorf("--code-sign-key: %w", err)
		}
		for i := range files {
			if files[i].f.Signature, err = keys.Sign(k, files[i].data); err != nil {
				return fmt.Errorf("sign %s: %w", files[i].path, err)
			}
		}
	case sigPath != "":
		text, err := os.ReadFile(sigPath)
		if err != nil {
			return fmt.Errorf("read --signatures: %w", err)
		}
		sigs, err := appversion.ParseSignatures(string(text))
		if err != nil {
			return fmt.Errorf("--signatures %s: %w", sigPath, err)
		}
		for i := range files {
			base := filepath.Base(files[i].path)
			s, ok := sigs[base]
			if !ok {
				return fmt.Errorf("--signatures %s has no signature for %s (sign it with: taskctl sign --key KEY %s)", sigPath, base, base)
			}
			if s.MD5 != files[i].f.MD5 {
				return fmt.Errorf("--signatures %s: %s was signed with md5 %s but the file's md5 is %s: sign this file again",
					sigPath, base, s.MD5, files[i].f.MD5)
			}
			files[i].f.Signature = s.Signature
		}
	default:
		return errors.New("--file needs --code-sign-key or --signatures: the client runs no unsigned app file")
	}
	pub, err := keys.ReadPublicFile(pubPath)
	if errors.Is(err, fs.ErrNotExist) {
		t.notef("note: %s not found; the signatures were not checked against the key the scheduler sends\n", pubPath)
		return nil
	}
	if err != nil {
		return fmt.Errorf("--code-sign-public: %w", err)
	}
	for _, f := range files {
		if err := keys.Verify(pub, f.data, f.f.Signature); err != nil {
			return fmt.Errorf("signature of %s does not match the code-signing public key %s: %w", f.path, pubPath, err)
		}
	}
	return nil
}

// installFiles copies the files into the download directory. A file already
// there with the same bytes is left alone (a re-run after a failed insert);
// one with other bytes is an error: clients that fetched it keep it under
// its name for good, so a name must never change content.
func installFiles(files []versionFile, downloadDir string, fan int) error {
	for _, f := range files {
		dst, err := fanout.Path(downloadDir, f.f.Name, fan)
		if err != nil {
			return err
		}
		old, err := os.ReadFile(dst)
		switch {
		case err == nil && bytes.Equal(old, f.data):
			continue
		case err == nil:
			return fmt.Errorf("install %s: %s exists with other content; app files must not change, add a new version number", f.path, dst)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("install %s: %w", f.path, err)
		}
		mode := fs.FileMode(0o644)
		if f.f.MainProgram {
			mode = 0o755
		}
		if err := writeNew(dst, f.data, mode); err != nil {
			return fmt.Errorf("install %s: %w", f.path, err)
		}
	}
	return nil
}

// writeNew writes data to path through a synced temporary file, so the data
// server never serves a partial app file.
func writeNew(path string, data []byte, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// signCommand signs files offline, where the code-signing private key is
// kept, for app-version add --signatures on the server.
func (t *tool) signCommand() *cli.Command {
	return &cli.Command{
		Name:      "sign",
		Usage:     "sign app files with a code-signing private key; prints each file's name, md5 and signature for app-version add --signatures",
		ArgsUsage: "FILE...",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "key", Required: true, Usage: "code-signing private key file (BOINC format, as keys generate --code-sign-out writes it; relative to the working directory)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return errors.New("sign: no files given")
			}
			// Signing is done offline, away from any project: paths are
			// taken as given, not under --project-dir.
			k, err := keys.ReadPrivateFile(c.String("key"))
			if err != nil {
				return fmt.Errorf("--key: %w", err)
			}
			sigs, err := signPaths(k, c.Args().Slice())
			if err != nil {
				return err
			}
			t.printf("%s", appversion.FormatSignatures(sigs))
			return nil
		},
	}
}

func signPaths(k *rsa.PrivateKey, paths []string) ([]appversion.Signed, error) {
	var out []appversion.Signed
	seen := map[string]bool{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("sign: %w", err)
		}
		base := filepath.Base(p)
		if seen[base] {
			return nil, fmt.Errorf("sign: two files named %s", base)
		}
		seen[base] = true
		sig, err := keys.Sign(k, data)
		if err != nil {
			return nil, fmt.Errorf("sign %s: %w", p, err)
		}
		sum := md5.Sum(data)
		out = append(out, appversion.Signed{Base: base, MD5: hex.EncodeToString(sum[:]), Signature: sig})
	}
	return out, nil
}
