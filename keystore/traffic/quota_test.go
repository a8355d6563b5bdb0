package traffic

import (
	"testing"
	"time"
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
