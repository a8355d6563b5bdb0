package keystore

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// Quota bounds what a key may spend in a calendar period (UTC).
type Quota struct {
	Limit  int64       `json:"limit"`
	Period QuotaPeriod `json:"period"`
}

// QuotaInput is a quota as a create or update sends it.
type QuotaInput struct {
	Limit  Optional[float64] `json:"limit"`
	Period Optional[string]  `json:"period"`
}

// QuotaPeriod is hour, day or month.
type QuotaPeriod string

const (
	QuotaHour  QuotaPeriod = "hour"
	QuotaDay   QuotaPeriod = "day"
	QuotaMonth QuotaPeriod = "month"

	// quotaPolicy names the quota in the RateLimit headers and in
	// violatedPolicies.
	quotaPolicy = "quota"
	// maxQuota bounds a quota's limit.
	maxQuota = 1_000_000_000_000
)

// start is the beginning of the period that holds t.
func (p QuotaPeriod) start(t time.Time) time.Time {
	t = t.UTC()
	switch p {
	case QuotaHour:
		return t.Truncate(time.Hour)
	case QuotaDay:
		return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	default:
		return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
	}
}

// next is the beginning of the period after the one starting at start.
func (p QuotaPeriod) next(start time.Time) time.Time {
	switch p {
	case QuotaHour:
		return start.Add(time.Hour)
	case QuotaDay:
		return start.AddDate(0, 0, 1)
	default:
		return start.AddDate(0, 1, 0)
	}
}

// nominalSeconds is the period's w in RateLimit-Policy: a month counts
// 30 days.
func (p QuotaPeriod) nominalSeconds() int64 {
	switch p {
	case QuotaHour:
		return 3600
	case QuotaDay:
		return 86400
	default:
		return 2_592_000
	}
}

func checkQuota(f *problem.Fields, in QuotaInput) *Quota {
	q := &Quota{}
	ok := true
	if q.Limit, ok = wholeNumber(f, "quota.limit", in.Limit, 1, maxQuota, "quota.limit must be a whole number from 1 to 1000000000000"); !ok {
		q = nil
	}
	switch p := QuotaPeriod(in.Period.Value); {
	case !in.Period.Set || in.Period.Null:
		f.Add("quota.period", "required", "quota.period must be hour, day or month")
		return nil
	case p != QuotaHour && p != QuotaDay && p != QuotaMonth:
		f.Add("quota.period", "invalid", "quota.period must be hour, day or month")
		return nil
	default:
		if q != nil {
			q.Period = p
		}
	}
	return q
}

// QuotaLease is a block of a key's quota for one period, which an
// instance spends from memory.
type QuotaLease struct {
	// Granted is what the block holds (0: the period's quota is spent).
	Granted int64
	// Used is what every instance has taken of the period, this block
	// included.
	Used int64
}

// ErrQuotaUnavailable is the 503 of a quota key when its instance holds
// no block and cannot reach the database for one: a quota is never
// overspent.
var ErrQuotaUnavailable = errors.New("quota: no block and the database is unreachable")

// quotaState is one key's quota on this instance: a block leased from the
// backend, spent by requests with one atomic decrement. A request that
// finds the block empty leases the next one itself (the only time a
// request waits on storage); one that finds it running low asks for the
// next in the background, so a busy key rarely waits.
type quotaState struct {
	// period is the unix seconds of the period the block belongs to.
	period atomic.Int64
	block  atomic.Int64
	// used is the period's total taken by all instances at the last
	// lease (this instance's unspent block included).
	used atomic.Int64
	// spentUntil is the unix ns before which the period counts as spent
	// here without asking again (the backend granted nothing).
	spentUntil atomic.Int64
	// failedUntil is the unix ns before which a lease is not tried again
	// after one failed (the database away): requests that find the block
	// empty get 503 at once rather than each waiting on the database.
	failedUntil atomic.Int64
	prefetch    atomic.Bool

	mu sync.Mutex // one lease at a time
}

// quotaBlock is how much an instance leases at once: a hundredth of the
// quota, 1 to 1000, and no more than an eighth of what is left, so the
// end of a period is spent in small blocks and every instance's last
// block is small.
func quotaBlock(limit, used int64) int64 {
	b := min(max(limit/100, 1), 1000)
	return max(min(b, (limit-used)/8), 1)
}
