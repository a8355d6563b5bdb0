package host

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingHost answers issues, counting the calls, failing while err is
// set, and holding each call until release is closed when it is set.
type countingHost struct {
	calls   atomic.Int64
	err     error
	release chan struct{}
}

func (*countingHost) Platform() string                                  { return "counting" }
func (*countingHost) Account(context.Context) (*Account, error)         { return &Account{}, nil }
func (*countingHost) Project(context.Context, string) (*Project, error) { return &Project{}, nil }
func (*countingHost) AddComment(context.Context, string, string) error  { return nil }
func (*countingHost) Page(context.Context, string) (*Page, error)       { return nil, ErrNotFound }
func (*countingHost) Search(context.Context, string, *Query, string, int, int) (*IssueList, error) {
	return &IssueList{}, nil
}
func (*countingHost) AddAttachment(context.Context, string, string, string, io.Reader, int64) error {
	return nil
}
func (*countingHost) UpdateField(context.Context, string, string, string) error { return nil }
func (*countingHost) Download(context.Context, string) (io.ReadCloser, error) {
	return nil, ErrNotFound
}
func (h *countingHost) Issue(_ context.Context, id string) (*Issue, error) {
	h.calls.Add(1)
	if h.release != nil {
		<-h.release
	}
	if h.err != nil {
		return nil, h.err
	}
	return &Issue{ID: id}, nil
}

// TestCached: an issue is read once per ttl, an error never kept, calls
// at once share one read; a ttl of 0 reads every time.
func TestCached(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	h := &countingHost{}
	c := Cached(h, 30*time.Second, clock)
	ctx := context.Background()
	read := func(id string) error { _, err := c.Issue(ctx, id); return err }

	steps := []struct {
		name    string
		advance time.Duration
		fail    error
		id      string
		calls   int64 // after the step
	}{
		{name: "first read", id: "1", calls: 1},
		{name: "within the ttl", advance: 29 * time.Second, id: "1", calls: 1},
		{name: "another issue", id: "2", calls: 2},
		{name: "after the ttl", advance: 2 * time.Second, id: "1", calls: 3},
		{name: "a failure", advance: time.Minute, fail: ErrUnavailable, id: "1", calls: 4},
		{name: "not kept", id: "1", calls: 5},
	}
	for _, s := range steps {
		now = now.Add(s.advance)
		h.err = s.fail
		if err := read(s.id); !errors.Is(err, s.fail) {
			t.Fatalf("%s: %v, want %v", s.name, err, s.fail)
		}
		if got := h.calls.Load(); got != s.calls {
			t.Fatalf("%s: %d calls, want %d", s.name, got, s.calls)
		}
	}

	// Ten readers of an item not yet read share one call.
	h.err, h.release = nil, make(chan struct{})
	before := h.calls.Load()
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() { defer wg.Done(); _ = read("3") }()
	}
	for h.calls.Load() == before {
		time.Sleep(time.Millisecond)
	}
	close(h.release)
	wg.Wait()
	if got := h.calls.Load() - before; got != 1 {
		t.Errorf("%d calls for ten readers at once, want 1", got)
	}

	if Cached(h, 0, clock) != Host(h) {
		t.Error("a ttl of 0 wraps the host")
	}
}
