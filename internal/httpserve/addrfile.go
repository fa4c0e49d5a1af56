package httpserve

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// AddrFile tells whoever started a program where its listeners are: a
// program given port 0 gets a free port from the kernel at bind time, so
// nobody has to pick one beforehand (a port picked by binding and closing
// is free only until someone else binds it). The file holds one line
// "name host:port" per listener bound so far, name being the flag that
// set its address ("listen", "addr"). It is replaced as a whole (a
// temporary file renamed over it) at each bind, so a reader sees every
// line of one version or none of it. A nil *AddrFile records nothing.
type AddrFile struct {
	path string

	mu    sync.Mutex
	addrs map[string]string
}

// NewAddrFile returns the address file at path; "" records nothing (nil).
func NewAddrFile(path string) *AddrFile {
	if path == "" {
		return nil
	}
	return &AddrFile{path: path, addrs: map[string]string{}}
}

// Listen listens on TCP addr (port 0: any free port) and records the
// address it bound under name in f.
func Listen(addr, name string, f *AddrFile) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if err := f.record(name, ln.Addr().String()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// record adds name's address and rewrites the file.
func (f *AddrFile) record(name, addr string) error {
	if f == nil {
		return nil
	}
	if name == "" || strings.ContainsAny(name, " \n") {
		return fmt.Errorf("address file %s: listener name %q", f.path, name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addrs[name] = addr
	names := make([]string, 0, len(f.addrs))
	for n := range f.addrs {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s %s\n", n, f.addrs[n])
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), "."+filepath.Base(f.path)+".*")
	if err != nil {
		return fmt.Errorf("address file: %w", err)
	}
	_, werr := tmp.WriteString(b.String())
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("address file %s: %w", f.path, err)
	}
	if err := os.Rename(tmp.Name(), f.path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("address file: %w", err)
	}
	return nil
}

// ReadAddrFile reads an address file: listener name to host:port.
func ReadAddrFile(path string) (map[string]string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		name, addr, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			return nil, fmt.Errorf("address file %s: line %q is not \"name host:port\"", path, sc.Text())
		}
		out[name] = addr
	}
	return out, sc.Err()
}
