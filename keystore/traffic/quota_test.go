package traffic

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestQuotaSpanCache: the block's remembered period serves only a quota
// of its kind and a time within it; a refund goes back only into the
// block it came from.
func TestQuotaSpanCache(t *testing.T) {
	var qs QuotaState
	month := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 11, 27, 21, 30, 0, 0, time.UTC)
	qs.setPeriod(QuotaMonth, month)
	tests := []struct {
		name      string
		q         Quota
		at        time.Time
		wantStart time.Time
		wantEnd   time.Time
	}{
		{"the block's own period", Quota{10, QuotaMonth}, now, month, month.AddDate(0, 1, 0)},
		{"a day quota after a change of kind", Quota{10, QuotaDay}, now, now.Truncate(24 * time.Hour), now.Truncate(24 * time.Hour).Add(24 * time.Hour)},
		{"the next month", Quota{10, QuotaMonth}, month.AddDate(0, 1, 3), month.AddDate(0, 1, 0), month.AddDate(0, 2, 0)},
	}
	for _, tt := range tests {
		span, end := qs.spanAt(&tt.q, tt.at)
		if span.Period != tt.q.Period || !span.Start.Equal(tt.wantStart) || !end.Equal(tt.wantEnd) {
			t.Errorf("%s: %v %v to %v, want %v to %v", tt.name, span.Period, span.Start, end, tt.wantStart, tt.wantEnd)
		}
	}
	qs.block.Store(5)
	gen := qs.generation.Load()
	qs.Refund(Spent{month.Unix(), gen})
	if qs.block.Load() != 6 {
		t.Errorf("refund into its own block: %d, want 6", qs.block.Load())
	}
	qs.setPeriod(QuotaMonth, month.AddDate(0, 1, 0))
	qs.Refund(Spent{month.Unix(), gen})
	qs.generation.Add(1)
	qs.Refund(Spent{month.AddDate(0, 1, 0).Unix(), gen})
	if qs.block.Load() != 6 {
		t.Errorf("refunds into a moved or changed block: %d, want 6 (the units stay spent)", qs.block.Load())
	}
}

// leaser grants what is asked of a quota, up to its limit, counting the
// leases.
type leaser struct {
	q      Quota
	used   int64
	leases atomic.Int64
}

func (l *leaser) CurrentQuota() *Quota { return &l.q }

func (l *leaser) LeaseQuota(_ QuotaSpan, limit, want int64, _ time.Time) (QuotaLease, error) {
	l.leases.Add(1)
	n := min(want, limit-l.used)
	l.used += n
	return QuotaLease{Granted: n, Used: l.used}, nil
}

// TestPrefetchAfterLease: a prefetch that waited for the lock while a
// request found the block empty and leased one leases no second block:
// an instance holds at most a block and a half, which a crash loses.
func TestPrefetchAfterLease(t *testing.T) {
	l := &leaser{q: Quota{1000, QuotaDay}}
	var qs QuotaState
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if _, err := qs.Spend(&l.q, now, l); err != nil { // the first block, of 10
		t.Fatal(err)
	}
	qs.mu.Lock() // the prefetch about to start waits for it
	for qs.block.Load() > 4 {
		if _, err := qs.Spend(&l.q, now, l); err != nil {
			t.Fatal(err)
		}
	}
	if !qs.prefetch.Load() {
		t.Fatal("no prefetch below half a block")
	}
	// Meanwhile the block runs dry and a request leases the next.
	qs.block.Store(0)
	if err := qs.lease(&l.q, QuotaDay.Span(now), now, l); err != nil {
		t.Fatal(err)
	}
	qs.mu.Unlock()
	testwait.For(t, testwait.Generous, "the prefetch to end", func() bool { return !qs.prefetch.Load() })
	if n, b := l.leases.Load(), qs.block.Load(); n != 2 || b != 10 {
		t.Errorf("%d leases, a block of %d; want 2 and 10: the waiting prefetch leased a second block", n, b)
	}
}
