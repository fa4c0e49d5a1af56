package simclient

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/taskserver/taskserver/internal/protocol"
)

// stickyFiles are the sticky input files a host holds for one project, as
// the real client keeps them between tasks: a task needing one the host
// holds (or is downloading for another task) takes that copy instead of
// downloading it again, the scheduler may leave its file_info out of a
// reply, and every request lists the files held. Download goroutines and
// the host goroutine share it, hence the lock.
type stickyFiles struct {
	mu    sync.Mutex
	files map[string]*stickyFile
}

// stickyFile is one sticky file, held or being downloaded.
type stickyFile struct {
	info protocol.FileInfo
	// done is closed when the first download of it ended; data is then
	// its content, or nil if that download failed.
	done chan struct{}
	data []byte
}

// info returns the description of the sticky file name the host holds or
// is downloading.
func (s *stickyFiles) info(name string) (protocol.FileInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[name]
	if !ok {
		return protocol.FileInfo{}, false
	}
	return f.info, true
}

// get returns the content of sticky file fi: the copy held, or one
// download shared by every task needing it at once. It reports whether the
// content was held (or downloaded by another task) rather than downloaded
// here. A failed download is not kept, so the next task tries again.
func (s *stickyFiles) get(ctx context.Context, fi protocol.FileInfo, download func() ([]byte, error)) ([]byte, bool, error) {
	s.mu.Lock()
	if s.files == nil {
		s.files = map[string]*stickyFile{}
	}
	f, ok := s.files[fi.Name]
	if !ok || (f.info.MD5Cksum != fi.MD5Cksum && fi.MD5Cksum != "") {
		f = &stickyFile{info: fi, done: make(chan struct{})}
		s.files[fi.Name] = f
		s.mu.Unlock()
		b, err := download()
		s.mu.Lock()
		if err != nil {
			if s.files[fi.Name] == f {
				delete(s.files, fi.Name)
			}
		} else {
			f.data = b
		}
		s.mu.Unlock()
		close(f.done)
		return b, false, err
	}
	s.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
	if f.data == nil {
		b, err := download() // the other task's download failed: try ours
		return b, false, err
	}
	return f.data, true, nil
}

// held lists the files held, for a scheduler request.
func (s *stickyFiles) held() []protocol.HostFile {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []protocol.HostFile
	for name, f := range s.files {
		select {
		case <-f.done:
			if f.data != nil {
				out = append(out, protocol.HostFile{Name: name, Nbytes: float64(len(f.data)), Status: protocol.FilePresent})
			}
		default:
		}
	}
	slices.SortFunc(out, func(a, b protocol.HostFile) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// forget drops the files the server no longer wants kept
// (<delete_file_info>).
func (s *stickyFiles) forget(names []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		delete(s.files, n)
	}
}
