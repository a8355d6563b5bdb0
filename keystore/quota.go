package keystore

import (
	"context"

	"encoding/json"
	"errors"
	"fmt"
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

// QuotaSpan is one calendar period of a quota: its kind and its start.
// The kind is part of it: an hour, a day and a month can start at the
// same instant.
type QuotaSpan struct {
	Period QuotaPeriod
	Start  time.Time
}

// span is the period of kind p that holds t.
func (p QuotaPeriod) span(t time.Time) QuotaSpan { return QuotaSpan{p, p.start(t)} }

// periodSpan is a period of a block, with its kind and the start of the
// next, read with one atomic load so that its parts always belong
// together.
type periodSpan struct {
	kind       QuotaPeriod
	start, end int64 // unix seconds
}

// setPeriod makes the block the period of kind p starting at start (a
// zero start: none).
func (qs *quotaState) setPeriod(p QuotaPeriod, start time.Time) {
	if start.IsZero() {
		qs.span.Store(nil)
		qs.period.Store(0)
		return
	}
	qs.period.Store(start.Unix())
	qs.span.Store(&periodSpan{p, start.Unix(), p.next(start).Unix()})
}

// spanAt is the period of q that holds now and the start of the next:
// from the block's period while it is of q's kind and now is within it,
// else reckoned.
func (qs *quotaState) spanAt(q *Quota, now time.Time) (QuotaSpan, time.Time) {
	if ps := qs.span.Load(); ps != nil && ps.kind == q.Period {
		if sec := now.Unix(); sec >= ps.start && sec < ps.end {
			return QuotaSpan{q.Period, time.Unix(ps.start, 0).UTC()}, time.Unix(ps.end, 0).UTC()
		}
	}
	span := q.Period.span(now)
	return span, q.Period.next(span.Start)
}

// refund puts back one unit taken from the block of period start, unless
// the block has moved to another period or been taken back by a change
// since (generation): the unit then stays spent, never overspent.
func (qs *quotaState) refund(start int64, generation uint64) {
	qs.mu.Lock()
	if qs.period.Load() == start && qs.generation.Load() == generation {
		qs.block.Add(1)
	}
	qs.mu.Unlock()
}

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

// checkQuota reads and checks a quota, a JSON object as sent.
func checkQuota(f *problem.Fields, raw json.RawMessage) *Quota {
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
	// period is the unix seconds of the period the block belongs to, and
	// span that period whole (nil: not known), from which the key check
	// finds the period of now without calendar arithmetic.
	period atomic.Int64
	span   atomic.Pointer[periodSpan]
	block  atomic.Int64
	// generation counts the changes of the quota that took the block
	// back or dropped it (refund).
	generation atomic.Uint64
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

// errQuotaSpent is the quota of the period used up.
var errQuotaSpent = errors.New("quota spent")

// spendQuota takes one unit of m's quota q at now: from the block this
// instance holds, or, when it is empty, from a new block it leases.
func (k *Keys) spendQuota(m *meter, q *Quota, now time.Time) error {
	qs := &m.quota
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
					_ = k.lease(m, q, span, now) // a failure shows when the block is empty
				}()
			}
			return err
		}
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	for {
		if qs.period.Load() == p {
			if left, err := qs.take(now); left >= 0 || err != nil {
				return err
			}
		} else if now.UnixNano() < qs.failedUntil.Load() {
			return ErrQuotaUnavailable
		}
		granted, err := k.leaseGranted(m, q, span, now)
		if err != nil {
			qs.failedUntil.Store(time.Now().Add(quotaRetry).UnixNano())
			return fmt.Errorf("%w: %w", ErrQuotaUnavailable, err)
		}
		if granted == 0 {
			return errQuotaSpent
		}
	}
}

// take spends one unit of the block of the current period and returns
// what is left of it; -1 when the block is empty, with errQuotaSpent or
// ErrQuotaUnavailable when the last lease said so a moment ago, nil when
// a lease is to be tried.
func (qs *quotaState) take(now time.Time) (int64, error) {
	if left := qs.block.Add(-1); left >= 0 {
		return left, nil
	}
	qs.block.Add(1)
	switch ns := now.UnixNano(); {
	case ns < qs.spentUntil.Load():
		return -1, errQuotaSpent
	case ns < qs.failedUntil.Load():
		return -1, ErrQuotaUnavailable
	}
	return -1, nil
}

// changed follows a change of the key's quota from old to q: a block of
// another kind of period was leased from another row and is dropped (its
// units count as spent there); a lower limit takes back the block the
// instance holds and hands its units to give; a new limit may open a
// spent period.
func (qs *quotaState) changed(old, q *Quota, give func(span QuotaSpan, n int64)) {
	if old == nil || q == nil || *old == *q {
		return
	}
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.generation.Add(1)
	qs.spentUntil.Store(0)
	if old.Period != q.Period {
		qs.block.Store(0)
		qs.used.Store(0)
		qs.setPeriod("", time.Time{})
		return
	}
	if q.Limit < old.Limit {
		// The block was leased under the higher limit: nothing more is
		// spent from it, and its units go back to the period so that
		// the next lease asks under the new limit.
		if n := qs.block.Swap(0); n > 0 && give != nil {
			qs.used.Add(-n) // the key's view at once, as if given back
			give(QuotaSpan{old.Period, time.Unix(qs.period.Load(), 0).UTC()}, n)
		}
	}
}

// leaseGranted is lease returning what it granted.
func (k *Keys) leaseGranted(m *meter, q *Quota, span QuotaSpan, now time.Time) (int64, error) {
	before := m.quota.block.Load()
	if err := k.lease(m, q, span, now); err != nil {
		return 0, err
	}
	return max(m.quota.block.Load()-before, 0), nil
}

// quotaRetry is how long an instance counts a period as spent after the
// backend granted nothing, before it asks again (a block another
// instance gave back on its stop).
const quotaRetry = time.Second

// lease takes a new block of m's quota for the period span. The caller
// holds m.quota.mu.
func (k *Keys) lease(m *meter, q *Quota, span QuotaSpan, now time.Time) error {
	qs := &m.quota
	// The quota as it is now: a request (or a prefetch) that began
	// before a change leases under the new limit, and in a period of the
	// new kind; a quota removed meanwhile leases nothing.
	_, cur := m.holder.policies()
	if cur == nil {
		return nil
	}
	if cur.Period != q.Period {
		span = cur.Period.span(now)
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
	l, err := k.backend.LeaseQuota(context.Background(), m.holder.holderID(), span, q.Limit, want, m.holder.quotaExhausted(now))
	if err != nil {
		return err
	}
	qs.used.Store(l.Used)
	if l.Granted == 0 {
		qs.spentUntil.Store(now.Add(quotaRetry).UnixNano())
		return nil
	}
	qs.block.Add(l.Granted)
	return nil
}

// giveBack returns n unspent units of the quota period span of holder
// id (a key or a consumer), taken back from this instance's block when
// the limit was lowered. On an error they stay counted as spent: a quota
// is never overspent.
func (k *Keys) giveBack(id string, span QuotaSpan, n int64) {
	if err := k.backend.ReturnQuota(context.Background(), id, span, n); err == nil {
		return
	}
	if m := k.meterOf(id); m != nil && m.quota.period.Load() == span.Start.Unix() {
		m.quota.used.Add(n)
	}
}

// ReturnQuota gives back, on a clean stop, the unspent blocks of the
// current period that this instance holds, keys' and consumers', so that
// other instances can spend them. It returns how many units it gave back.
func (k *Keys) ReturnQuota() (int64, error) {
	now := k.now()
	var total int64
	var errs []error
	for _, m := range k.meters() {
		_, q := m.holder.policies()
		if q == nil {
			continue
		}
		qs := &m.quota
		qs.mu.Lock()
		span := q.Period.span(now)
		if qs.period.Load() == span.Start.Unix() {
			if n := qs.block.Swap(0); n > 0 {
				if err := k.backend.ReturnQuota(context.Background(), m.holder.holderID(), span, n); err != nil {
					qs.block.Add(n)
					errs = append(errs, err)
				} else {
					total += n
					qs.used.Add(-n)
				}
			}
		}
		qs.mu.Unlock()
	}
	return total, errors.Join(errs...)
}

// entries returns every key in memory.
func (k *Keys) entries() []*Entry {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make([]*Entry, 0, len(k.byID))
	for _, e := range k.byID {
		out = append(out, e)
	}
	return out
}

// meters returns every meter in memory: each key's and each consumer's.
func (k *Keys) meters() []*meter {
	k.mu.RLock()
	out := make([]*meter, 0, len(k.byID))
	for _, e := range k.byID {
		out = append(out, &e.meter)
	}
	k.mu.RUnlock()
	k.scopeMu.RLock()
	for _, c := range k.consumers {
		out = append(out, &c.meter)
	}
	k.scopeMu.RUnlock()
	return out
}

// meterOf is the meter of holder id, a key or a consumer; nil if none.
func (k *Keys) meterOf(id string) *meter {
	if e := k.entry(id); e != nil {
		return &e.meter
	}
	k.scopeMu.RLock()
	defer k.scopeMu.RUnlock()
	if c := k.consumers[id]; c != nil {
		return &c.meter
	}
	return nil
}

// quotaUsed is what instances have taken of q in the period of now, less
// this instance's unspent block, and when the next period begins.
func (m *meter) quotaUsed(q *Quota, now time.Time) (int64, time.Time) {
	span, next := m.quota.spanAt(q, now)
	used := int64(0)
	if m.quota.period.Load() == span.Start.Unix() {
		used = max(m.quota.used.Load()-max(m.quota.block.Load(), 0), 0)
	}
	return used, next
}

// quotaView is what the holder of m has used of its quota (its own or
// its plan's) this period and when it resets; nil without a quota.
func (m *meter) quotaView(now time.Time) (*int64, *time.Time) {
	_, q := m.holder.policies()
	if q == nil {
		return nil, nil
	}
	used, reset := m.quotaUsed(q, now)
	return &used, &reset
}

// ReadQuotas reads the quota use of the current period back from the
// backend (what other instances, or this one before a restart, took) for
// holder id (a key or a consumer), or every holder with a quota when id
// is empty: for an administrator's view.
func (k *Keys) ReadQuotas(id string) error {
	var list []*meter
	if id == "" {
		list = k.meters()
	} else if m := k.meterOf(id); m != nil {
		list = append(list, m)
	}
	now := k.now()
	for _, m := range list {
		_, q := m.holder.policies()
		if q == nil {
			continue
		}
		span := q.Period.span(now)
		used, err := k.backend.QuotaUsed(context.Background(), m.holder.holderID(), span)
		if err != nil {
			return err
		}
		qs := &m.quota
		qs.mu.Lock()
		if _, cur := m.holder.policies(); cur == nil || cur.Period != q.Period {
			qs.mu.Unlock() // changed meanwhile: the next view reads it
			continue
		}
		if qs.period.Load() != span.Start.Unix() {
			qs.block.Store(0)
			qs.spentUntil.Store(0)
			qs.setPeriod(span.Period, span.Start)
		}
		qs.used.Store(max(used, qs.used.Load()))
		qs.mu.Unlock()
	}
	return nil
}
