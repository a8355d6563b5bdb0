package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// Quota bounds what a holder may spend in a calendar period (UTC).
type Quota struct {
	Limit  int64       `json:"limit"`
	Period QuotaPeriod `json:"period"`
}

// QuotaPeriod is hour, day or month.
type QuotaPeriod string

const (
	QuotaHour  QuotaPeriod = "hour"
	QuotaDay   QuotaPeriod = "day"
	QuotaMonth QuotaPeriod = "month"

	// QuotaPolicy names the quota in the RateLimit headers and in
	// violatedPolicies.
	QuotaPolicy = "quota"
	// maxQuota bounds a quota's limit.
	maxQuota = 1_000_000_000_000
)

// QuotaSpan is one calendar period of a quota: its kind and its start.
// The kind is part of it: an hour, a day and a month can start at the
// same instant.
type QuotaSpan struct {
	Period QuotaPeriod
	Start  time.Time
}

// Span is the period of kind p that holds t.
func (p QuotaPeriod) Span(t time.Time) QuotaSpan { return QuotaSpan{p, p.Start(t)} }

// periodSpan is a period of a block, with its kind and the start of the
// next, read with one atomic load so that its parts always belong
// together.
type periodSpan struct {
	kind       QuotaPeriod
	start, end int64 // unix seconds
}

// setPeriod makes the block the period of kind p starting at start (a
// zero start: none).
func (qs *QuotaState) setPeriod(p QuotaPeriod, start time.Time) {
	if start.IsZero() {
		qs.span.Store(nil)
		qs.period.Store(0)
		return
	}
	qs.period.Store(start.Unix())
	qs.span.Store(&periodSpan{p, start.Unix(), p.Next(start).Unix()})
}

// spanAt is the period of q that holds now and the start of the next:
// from the block's period while it is of q's kind and now is within it,
// else reckoned.
func (qs *QuotaState) spanAt(q *Quota, now time.Time) (QuotaSpan, time.Time) {
	if ps := qs.span.Load(); ps != nil && ps.kind == q.Period {
		if sec := now.Unix(); sec >= ps.start && sec < ps.end {
			return QuotaSpan{q.Period, time.Unix(ps.start, 0).UTC()}, time.Unix(ps.end, 0).UTC()
		}
	}
	span := q.Period.Span(now)
	return span, q.Period.Next(span.Start)
}

// Refund puts back the unit u that Spend took, unless the block has
// moved to another period or been taken back by a change since: the unit
// then stays spent, never overspent.
func (qs *QuotaState) Refund(u Spent) {
	qs.mu.Lock()
	if qs.period.Load() == u.period && qs.generation.Load() == u.generation {
		qs.block.Add(1)
	}
	qs.mu.Unlock()
}

// Start is the beginning of the period that holds t.
func (p QuotaPeriod) Start(t time.Time) time.Time {
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

// Next is the beginning of the period after the one starting at start.
func (p QuotaPeriod) Next(start time.Time) time.Time {
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

// CheckQuota reads and checks a quota, a JSON object as sent.
func CheckQuota(f *problem.Fields, raw json.RawMessage) *Quota {
	bad := len(f.List())
	in, ok := jsonObject(f, "quota", raw, "limit", "period")
	if !ok {
		return nil
	}
	q := &Quota{}
	q.Limit, _ = wholeNumber(f, "quota.limit", in["limit"], 1, maxQuota, "quota.limit must be a whole number from 1 to 1000000000000")
	const msg = "quota.period must be hour, day or month"
	if period, ok := jsonString(f, "quota.period", in["period"], msg); ok {
		switch p := QuotaPeriod(period); p {
		case QuotaHour, QuotaDay, QuotaMonth:
			q.Period = p
		default:
			f.Add("quota.period", "invalid", msg)
		}
	}
	if len(f.List()) > bad {
		return nil
	}
	return q
}

// QuotaLease is a block of a holder's quota for one period, which an
// instance spends from memory.
type QuotaLease struct {
	// Granted is what the block holds (0: the period's quota is spent).
	Granted int64
	// Used is what every instance has taken of the period, this block
	// included.
	Used int64
}

// ErrQuotaUnavailable is the 503 of a holder of a quota when its
// instance holds no block and cannot reach the database for one: a
// quota is never overspent.
var ErrQuotaUnavailable = errors.New("quota: no block and the database is unreachable")

// QuotaState is one holder's quota on this instance: a block leased from
// storage, spent by requests with one atomic decrement. A request that
// finds the block empty leases the next one itself (the only time a
// request waits on storage); one that finds it running low asks for the
// next in the background, so a busy holder rarely waits.
type QuotaState struct {
	// period is the unix seconds of the period the block belongs to, and
	// span that period whole (nil: not known), from which Spend
	// finds the period of now without calendar arithmetic.
	period atomic.Int64
	span   atomic.Pointer[periodSpan]
	block  atomic.Int64
	// generation counts the changes of the quota that took the block
	// back or dropped it (Refund).
	generation atomic.Uint64
	// used is the period's total taken by all instances at the last
	// lease (this instance's unspent block included).
	used atomic.Int64
	// spentUntil is the unix ns before which the period counts as spent
	// here without asking again (storage granted nothing).
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

// ErrQuotaSpent is the quota of the period used up.
var ErrQuotaSpent = errors.New("quota spent")

// take spends one unit of the block of the current period and returns
// what is left of it; -1 when the block is empty, with ErrQuotaSpent or
// ErrQuotaUnavailable when the last lease said so a moment ago, nil when
// a lease is to be tried.
func (qs *QuotaState) take(now time.Time) (int64, error) {
	if left := qs.block.Add(-1); left >= 0 {
		return left, nil
	}
	qs.block.Add(1)
	switch ns := now.UnixNano(); {
	case ns < qs.spentUntil.Load():
		return -1, ErrQuotaSpent
	case ns < qs.failedUntil.Load():
		return -1, ErrQuotaUnavailable
	}
	return -1, nil
}

// Changed follows a change of the holder's quota from old to q (nil:
// none). A quota taken away, or one of another kind of period, ends the
// block: its unspent units go to give, back to the period they were
// leased from, and the next spend leases afresh under q, from q's own
// period. So a quota removed and then set lower (the way from a plan's
// quota to one of the holder's own) never spends what was leased under
// the higher one. A lower limit takes back the block the instance holds
// likewise; a new limit may open a spent period.
func (qs *QuotaState) Changed(old, q *Quota, give func(span QuotaSpan, n int64)) {
	if old == nil && q == nil || old != nil && q != nil && *old == *q {
		return
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.generation.Add(1)
	qs.spentUntil.Store(0)
	if old == nil || q == nil || old.Period != q.Period {
		ps := qs.span.Load()
		if n := qs.block.Swap(0); n > 0 && ps != nil && give != nil {
			give(QuotaSpan{ps.kind, time.Unix(ps.start, 0).UTC()}, n)
		}
		qs.used.Store(0)
		qs.setPeriod("", time.Time{})
		return
	}
	if q.Limit < old.Limit {
		// The block was leased under the higher limit: nothing more is
		// spent from it, and its units go back to the period so that
		// the next lease asks under the new limit.
		if n := qs.block.Swap(0); n > 0 && give != nil {
			qs.used.Add(-n) // the holder's view at once, as if given back
			give(QuotaSpan{old.Period, time.Unix(qs.period.Load(), 0).UTC()}, n)
		}
	}
}

// quotaRetry is how long an instance counts a period as spent after the
// store granted nothing, before it asks again (a block another
// instance gave back on its stop).
const quotaRetry = time.Second

// A Leaser is where the blocks of one holder's quota come from: the
// holder's quota as it is now, and its store.
type Leaser interface {
	// CurrentQuota is the holder's quota as it is now (nil: none).
	CurrentQuota() *Quota
	// LeaseQuota takes up to want units of the holder's quota limit for
	// the period span, as Store.LeaseQuota does.
	LeaseQuota(span QuotaSpan, limit, want int64, now time.Time) (QuotaLease, error)
}

// Spent is the unit of a block that Spend took, which Refund can put
// back.
type Spent struct {
	period     int64
	generation uint64
}

// Spend takes one unit of quota q at now: from the block this instance
// holds, or, when it is empty, from a new block it leases from l. It
// answers ErrQuotaSpent when the period's quota is used up, and
// ErrQuotaUnavailable when there is no block and l cannot lease one.
func (qs *QuotaState) Spend(q *Quota, now time.Time, l Leaser) (Spent, error) {
	generation := qs.generation.Load()
	span, _ := qs.spanAt(q, now)
	if cur := qs.period.Load(); span.Start.Unix() < cur {
		// A request that began before the period turned spends from the
		// current one: the block never goes back a period.
		span.Start = time.Unix(cur, 0).UTC()
	}
	p := span.Start.Unix()
	if qs.period.Load() == p {
		if left, err := qs.take(now); left >= 0 || err != nil {
			if left >= 0 && left < quotaBlock(q.Limit, qs.used.Load())/2 && qs.prefetch.CompareAndSwap(false, true) {
				go func() {
					defer qs.prefetch.Store(false)
					qs.mu.Lock()
					defer qs.mu.Unlock()
					// A request that found the block empty while this
					// waited for the lock (a busy machine schedules it
					// late) leased one already: a second would hold two
					// blocks, which a crash loses.
					if qs.period.Load() != p || qs.block.Load() >= quotaBlock(q.Limit, qs.used.Load())/2 {
						return
					}
					_ = qs.lease(q, span, now, l) // a failure shows when the block is empty
				}()
			}
			return Spent{p, generation}, err
		}
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for {
		if qs.period.Load() == p {
			if left, err := qs.take(now); left >= 0 || err != nil {
				return Spent{p, generation}, err
			}
		} else if now.UnixNano() < qs.failedUntil.Load() {
			return Spent{}, ErrQuotaUnavailable
		}
		granted, err := qs.leaseGranted(q, span, now, l)
		if err != nil {
			qs.failedUntil.Store(time.Now().Add(quotaRetry).UnixNano())
			return Spent{}, fmt.Errorf("%w: %w", ErrQuotaUnavailable, err)
		}
		if granted == 0 {
			return Spent{}, ErrQuotaSpent
		}
	}
}

// leaseGranted is lease returning what it granted.
func (qs *QuotaState) leaseGranted(q *Quota, span QuotaSpan, now time.Time, l Leaser) (int64, error) {
	before := qs.block.Load()
	if err := qs.lease(q, span, now, l); err != nil {
		return 0, err
	}
	return max(qs.block.Load()-before, 0), nil
}

// lease takes a new block of quota q for the period span from l. The
// caller holds qs.mu.
func (qs *QuotaState) lease(q *Quota, span QuotaSpan, now time.Time, l Leaser) error {
	// The quota as it is now: a request (or a prefetch) that began
	// before a change leases under the new limit, and in a period of the
	// new kind; a quota removed meanwhile leases nothing.
	cur := l.CurrentQuota()
	if cur == nil {
		return nil
	}
	if cur.Period != q.Period {
		span = cur.Period.Span(now)
	}
	q = cur
	if p := span.Start.Unix(); qs.period.Load() != p {
		// A block of a period that has ended is worth nothing.
		qs.block.Store(0)
		qs.used.Store(0)
		qs.spentUntil.Store(0)
		qs.setPeriod(span.Period, span.Start)
	}
	want := quotaBlock(q.Limit, qs.used.Load())
	got, err := l.LeaseQuota(span, q.Limit, want, now)
	if err != nil {
		return err
	}
	qs.used.Store(got.Used)
	if got.Granted == 0 {
		qs.spentUntil.Store(now.Add(quotaRetry).UnixNano())
		return nil
	}
	qs.block.Add(got.Granted)
	return nil
}

// Return hands the unspent block of the period span that this instance
// holds to give, to be given back to storage (on a clean stop, so that
// other instances can spend it), and returns how many units it gave;
// when give fails the block stays.
func (qs *QuotaState) Return(span QuotaSpan, give func(n int64) error) (int64, error) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.period.Load() != span.Start.Unix() {
		return 0, nil
	}
	n := qs.block.Swap(0)
	if n <= 0 {
		return 0, nil
	}
	if err := give(n); err != nil {
		qs.block.Add(n)
		return 0, err
	}
	qs.used.Add(-n)
	return n, nil
}

// Kept counts n units of the period span, which Changed handed to give,
// as used again when they could not be given back: a quota is never
// overspent.
func (qs *QuotaState) Kept(span QuotaSpan, n int64) {
	if qs.period.Load() == span.Start.Unix() {
		qs.used.Add(n)
	}
}

// Used is what instances have taken of q in the period of now, less
// this instance's unspent block, and when the next period begins.
func (qs *QuotaState) Used(q *Quota, now time.Time) (int64, time.Time) {
	span, next := qs.spanAt(q, now)
	used := int64(0)
	if qs.period.Load() == span.Start.Unix() {
		used = max(qs.used.Load()-max(qs.block.Load(), 0), 0)
	}
	return used, next
}

// Read takes used, what storage holds as taken of quota q's period span
// (by other instances, or by this one before a restart), for the view,
// unless the holder's quota (l's) changed its kind of period meanwhile.
func (qs *QuotaState) Read(q *Quota, span QuotaSpan, used int64, l Leaser) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if cur := l.CurrentQuota(); cur == nil || cur.Period != q.Period {
		return // changed meanwhile: the next view reads it
	}
	if qs.period.Load() != span.Start.Unix() {
		qs.block.Store(0)
		qs.spentUntil.Store(0)
		qs.setPeriod(span.Period, span.Start)
	}
	qs.used.Store(max(used, qs.used.Load()))
}
