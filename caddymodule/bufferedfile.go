package caddymodule

import (
	"bufio"
	"io"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/logging"
)

func init() {
	caddy.RegisterModule(BufferedFileWriter{})
}

// BufferedFileWriter is Caddy's file log writer with writes gathered in
// memory and flushed every FlushInterval, so a busy audit log costs one
// write(2) per interval rather than one per entry. Entries not yet
// flushed are lost if the process dies; they are flushed on a clean stop
// and on reload. Caddyfile: `output buffered_file <path> { ...file options }`.
type BufferedFileWriter struct {
	logging.FileWriter
	// FlushInterval bounds how long an entry waits in memory. Default 100ms.
	FlushInterval caddy.Duration `json:"flush_interval,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (BufferedFileWriter) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.logging.writers.buffered_file",
		New: func() caddy.Module { return new(BufferedFileWriter) },
	}
}

const defaultFlushInterval = 100 * time.Millisecond

// WriterKey tells Caddy's writer pool this is not the plain file writer of
// the same path.
func (w BufferedFileWriter) WriterKey() string { return "buffered_" + w.FileWriter.WriterKey() }

func (w BufferedFileWriter) String() string { return "buffered " + w.FileWriter.String() }

// OpenWriter opens the file and wraps it.
func (w BufferedFileWriter) OpenWriter() (io.WriteCloser, error) {
	f, err := w.FileWriter.OpenWriter()
	if err != nil {
		return nil, err
	}
	every := time.Duration(w.FlushInterval)
	if every <= 0 {
		every = defaultFlushInterval
	}
	bw := &bufferedWriter{w: bufio.NewWriterSize(f, 256<<10), closer: f, stop: make(chan struct{}), done: make(chan struct{})}
	go bw.flushEvery(every)
	return bw, nil
}

// UnmarshalCaddyfile takes the file writer's syntax.
func (w *BufferedFileWriter) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	return w.FileWriter.UnmarshalCaddyfile(d)
}

type bufferedWriter struct {
	mu     sync.Mutex
	w      *bufio.Writer
	closer io.Closer
	stop   chan struct{}
	done   chan struct{}
}

func (b *bufferedWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
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
			_ = b.w.Flush()
			b.mu.Unlock()
		}
	}
}

// Close flushes what is buffered and closes the file.
func (b *bufferedWriter) Close() error {
	close(b.stop)
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.w.Flush()
	if cerr := b.closer.Close(); err == nil {
		err = cerr
	}
	return err
}

// Interface guards
var (
	_ caddy.WriterOpener    = (*BufferedFileWriter)(nil)
	_ caddy.Provisioner     = (*BufferedFileWriter)(nil)
	_ caddyfile.Unmarshaler = (*BufferedFileWriter)(nil)
)
