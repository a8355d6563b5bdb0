package notify

import (
	"context"
	"fmt"
	"net/mail"
	"os"
	"path/filepath"
	"time"
)

// EMLSender "delivers" e-mails as RFC 5322 files in a directory, for
// deployments without SMTP (development, or a separate process that picks
// the files up). Each file is written to a temporary name and renamed, so a
// reader never sees half a message.
//
// A file is the mail as its recipient gets it, so it holds what keygate
// sends only to them (signing links, one-time passwords, signed
// contracts) in clear, unlike the outbox, which keeps bodies sealed until
// delivery: the directory is a mailbox and is as private as one.
type EMLSender struct {
	dir  string
	from string
}

// NewEMLSender creates dir (mode 0700: the files hold personal data) and
// returns a sender that writes there with from as sender.
func NewEMLSender(dir, from string) (*EMLSender, error) {
	if _, err := mail.ParseAddress(from); err != nil {
		return nil, fmt.Errorf("notify: eml from %q is not an address: %w", from, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("notify: eml directory: %w", err)
	}
	return &EMLSender{dir: dir, from: from}, nil
}

// fileName is the name of the file of m: its queue time and outbox ID, so
// files sort in queue order and a redelivery replaces its earlier copy.
func (s *EMLSender) fileName(m Message) string {
	return fmt.Sprintf("%s-%012d.eml", m.Queued.UTC().Format("20060102T150405.000000000Z"), m.ID)
}

// Send writes m to its file and syncs it and the directory to disk.
func (s *EMLSender) Send(ctx context.Context, m Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Queued.IsZero() {
		m.Queued = time.Now()
	}
	msg, err := compose(s.from, m)
	if err != nil {
		return err
	}
	// No .eml suffix until the rename: whatever picks up *.eml never sees
	// a half-written message.
	tmp, err := os.CreateTemp(s.dir, emlTempPattern)
	if err != nil {
		return fmt.Errorf("eml: %w", err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if _, err := msg.WriteTo(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("eml: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("eml: sync: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("eml: close: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, s.fileName(m))); err != nil {
		return fmt.Errorf("eml: %w", err)
	}
	return syncDir(s.dir)
}

// emlTempPattern names a message being written, before its rename.
const emlTempPattern = ".tmp-*"

// RemoveEMLLeftovers deletes from dir the files that a process killed
// while writing a message left under their temporary name, and says how
// many it removed. Such a message was never delivered: it is still in the
// outbox and will be written again, so the file is only a stale copy of
// its contents in clear. Call it only while nothing writes to dir (before
// the worker starts, under the database lock). A missing dir is no error.
func RemoveEMLLeftovers(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, emlTempPattern))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range files {
		if err := os.Remove(f); err != nil && !os.IsNotExist(err) {
			return n, fmt.Errorf("eml: %w", err)
		}
		n++
	}
	return n, nil
}

// syncDir makes a rename durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("eml: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("eml: sync directory: %w", err)
	}
	return nil
}
