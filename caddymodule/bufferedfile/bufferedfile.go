// Package bufferedfile is the `buffered_file` log writer module: Caddy's
// file writer with writes gathered in memory, for the audit log (see
// docs/operators.md, "The audit log").
package bufferedfile

import (
	"io"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/logging"
)

func init() {
	caddy.RegisterModule(Writer{})
}

// Writer is Caddy's file log writer with writes gathered in
// memory and flushed every FlushInterval, so a busy audit log costs one
// write(2) per interval rather than one per entry. Entries not yet
// flushed are lost if the process dies; they are flushed on a clean stop
// and on reload. Caddyfile: `output buffered_file <path> { ...file options }`.
type Writer struct {
	logging.FileWriter
	// FlushInterval bounds how long an entry waits in memory. Default 100ms.
	FlushInterval caddy.Duration `json:"flush_interval,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Writer) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.writers.buffered_file",
		New: func() caddy.Module { return new(Writer) },
	}
}

const defaultFlushInterval = 100 * time.Millisecond

// WriterKey tells Caddy's writer pool this is not the plain file writer of
// the same path.
func (w Writer) WriterKey() string { return "buffered_" + w.FileWriter.WriterKey() }

func (w Writer) String() string { return "buffered " + w.FileWriter.String() }

// OpenWriter opens the file and wraps it.
func (w Writer) OpenWriter() (io.WriteCloser, error) {
	f, err := w.FileWriter.OpenWriter()
	if err != nil {
		return nil, err
	}
	every := time.Duration(w.FlushInterval)
	if every <= 0 {
		every = defaultFlushInterval
	}
	bw := newBufferedWriter(f)
	go bw.flushEvery(every)
	openBuffered.Store(bw, struct{}{})
	return bw, nil
}

// openBuffered holds the buffered writers not closed yet. At a process's
// exit Caddy stops the apps but may leave log writers unclosed, and the
// writer's Sync is out of reach behind Caddy's wrapper: the webapi app
// flushes them all when it stops (SyncAll), after its last audit
// entries.
var openBuffered sync.Map // *bufferedWriter -> struct{}

// SyncAll writes what every open buffered writer holds.
func SyncAll() {
	openBuffered.Range(func(k, _ any) bool {
		_ = k.(*bufferedWriter).Sync()
		return true
	})
}

// bufferSize is how much the writer gathers before it writes at once.
const bufferSize = 256 << 10

// UnmarshalCaddyfile takes the file writer's syntax.
func (w *Writer) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return w.FileWriter.UnmarshalCaddyfile(d)
}

// bufferedWriter gathers writes in memory. Unlike a bufio.Writer, whose
// first write error sticks and stops every later write, a failed write
// (a full disk) drops what was gathered and the writer goes on: entries
// are lost while the disk is full, and logging resumes once it has room.
type bufferedWriter struct {
	mu  sync.Mutex
	f   io.WriteCloser
	buf []byte
	// cut says the last failed write ended inside a line: the next
	// write starts a new one, so that no entry is glued to a torn one.
	cut  bool
	stop chan struct{}
	done chan struct{}
}

func newBufferedWriter(f io.WriteCloser) *bufferedWriter {
	return &bufferedWriter{f: f, buf: make([]byte, 0, bufferSize), stop: make(chan struct{}), done: make(chan struct{})}
}

// Write gathers p, writing what was gathered first if p does not fit. It
// never fails: a write error is the flush's, and its entries are dropped.
func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.buf)+len(p) > bufferSize {
		_ = b.flushLocked()
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// flushLocked writes what was gathered; on an error it is dropped.
func (b *bufferedWriter) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	data := b.buf
	if b.cut {
		data = append([]byte{'\n'}, data...)
	}
	n, err := b.f.Write(data)
	if n > 0 {
		b.cut = data[n-1] != '\n'
	}
	if len(b.buf) > bufferSize {
		b.buf = make([]byte, 0, bufferSize) // one entry larger than the buffer
	} else {
		b.buf = b.buf[:0]
	}
	return err
}

func (b *bufferedWriter) flushEvery(d time.Duration) {
	defer close(b.done)
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
			b.mu.Lock()
			_ = b.flushLocked()
			b.mu.Unlock()
		}
	}
}

// Sync writes what is buffered, so that a logger's Sync reaches the file
// (zapcore.AddSync keeps this method).
func (b *bufferedWriter) Sync() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

// Close flushes what is buffered and closes the file.
func (b *bufferedWriter) Close() error {
	openBuffered.Delete(b)
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.flushLocked()
	if cerr := b.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Interface guards
var (
	_ caddy.WriterOpener    = (*Writer)(nil)
	_ caddy.Provisioner     = (*Writer)(nil)
	_ caddyfile.Unmarshaler = (*Writer)(nil)
)
