package bufferedfile

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fullDisk is a file that refuses writes while full, keeping part of the
// first refused one as a full disk may.
type fullDisk struct {
	full bool
	got  strings.Builder
}

func (f *fullDisk) Write(p []byte) (int, error) {
	if f.full {
		n := len(p) / 2
		f.got.Write(p[:n])
		return n, syscall.ENOSPC
	}
	return f.got.Write(p)
}

func (f *fullDisk) Close() error { return nil }

// TestBufferedWriterAfterFullDisk: entries written while the disk is full
// are dropped, and the log goes on once it has room, each entry on a line
// of its own (a bufio.Writer would keep the first error for ever).
func TestBufferedWriterAfterFullDisk(t *testing.T) {
	f := &fullDisk{}
	w := newBufferedWriter(f)
	go w.flushEvery(time.Hour)
	flush := func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.flushLocked()
	}
	w.Write([]byte("{\"msg\":\"before\"}\n"))
	if err := flush(); err != nil {
		t.Fatal(err)
	}
	f.full = true
	w.Write([]byte("{\"msg\":\"while full\"}\n"))
	if err := w.flushLocked(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on a full disk: %v", err)
	}
	f.full = false
	if _, err := w.Write([]byte("{\"msg\":\"after\"}\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(f.got.String(), "\n"), "\n")
	if len(lines) != 3 || lines[0] != `{"msg":"before"}` || lines[2] != `{"msg":"after"}` {
		t.Errorf("log after a full disk:\n%s", f.got.String())
	}
}
