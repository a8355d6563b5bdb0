package keystore

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
)

// RateSharer is a Backend that instances share rate-limit counts
// through: ShareRates adds each delta to its window's count and returns
// every instance's counts of the windows still current at now (this one
// and the one before, for each policy).
type RateSharer interface {
	ShareRates(now time.Time, deltas []RateCount) ([]RateCount, error)
}

// spend runs step 4½ of the key check, what the key may spend: its rate
// limits, then its quota. Nothing of it asks the database but a quota
// whose block is empty.
func (e *Entry) spend(d Decision, s *compiled, now time.Time) Decision {
	ns := now.UnixNano()
	if len(s.key.RateLimits) > 0 {
		if r := e.limits.take(ns); r.violated != 0 {
			d.RetryAfter = r.retryAfter
			for i, p := range s.key.RateLimits {
				if r.violated&(1<<i) != 0 {
					d.Violated = append(d.Violated, p.Name)
				}
			}
			return d.refuse(http.StatusTooManyRequests, problem.CodeRateLimited)
		}
	}
	if q := s.key.Quota; q != nil && e.keys != nil {
		err := e.keys.spendQuota(e, s, q, now)
		if err != nil && len(s.key.RateLimits) > 0 {
			e.limits.untake(ns)
		}
		switch {
		case errors.Is(err, errQuotaSpent):
			reset := q.Period.next(q.Period.start(now))
			d.RetryAfter = max(int64(reset.Sub(now)+time.Second-1)/int64(time.Second), 1)
			d.Violated = []string{quotaPolicy}
			return d.refuse(http.StatusTooManyRequests, problem.CodeQuotaExceeded)
		case err != nil:
			d.RetryAfter = 1
			return d.refuse(http.StatusServiceUnavailable, problem.CodeUnavailable)
		}
	}
	return d
}

// errQuotaSpent is the quota of the period used up.
var errQuotaSpent = errors.New("quota spent")

// spendQuota takes one unit of e's quota q at now: from the block this
// instance holds, or, when it is empty, from a new block it leases.
func (k *Keys) spendQuota(e *Entry, s *compiled, q *Quota, now time.Time) error {
	qs := &e.quota
	start := q.Period.start(now)
	p := start.Unix()
	if qs.period.Load() == p {
		if left, err := qs.take(now); left >= 0 || err != nil {
			if left >= 0 && left < quotaBlock(q.Limit, qs.used.Load())/2 && qs.prefetch.CompareAndSwap(false, true) {
				go func() {
					defer qs.prefetch.Store(false)
					qs.mu.Lock()
					defer qs.mu.Unlock()
					_ = k.lease(e, s, q, start, now) // a failure shows when the block is empty
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
		granted, err := k.leaseGranted(e, s, q, start, now)
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

// leaseGranted is lease returning what it granted.
func (k *Keys) leaseGranted(e *Entry, s *compiled, q *Quota, start, now time.Time) (int64, error) {
	before := e.quota.block.Load()
	if err := k.lease(e, s, q, start, now); err != nil {
		return 0, err
	}
	return max(e.quota.block.Load()-before, 0), nil
}

// quotaRetry is how long an instance counts a period as spent after the
// backend granted nothing, before it asks again (a block another
// instance gave back on its stop).
const quotaRetry = time.Second

// lease takes a new block of e's quota for the period starting at start.
// The caller holds e.quota.mu.
func (k *Keys) lease(e *Entry, s *compiled, q *Quota, start, now time.Time) error {
	qs := &e.quota
	if p := start.Unix(); qs.period.Load() != p {
		// A block of a period that has ended is worth nothing.
		qs.block.Store(0)
		qs.used.Store(0)
		qs.spentUntil.Store(0)
		qs.period.Store(p)
	}
	want := quotaBlock(q.Limit, qs.used.Load())
	l, err := k.backend.LeaseQuota(s.key.ID, start, q.Limit, want, k.emitKey(events.KeyQuotaExhausted, &s.key, now))
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

// ReturnQuota gives back, on a clean stop, the unspent blocks of the
// current period that this instance holds, so that other instances can
// spend them. It returns how many units it gave back.
func (k *Keys) ReturnQuota() (int64, error) {
	now := k.now()
	var total int64
	var errs []error
	for _, e := range k.entries() {
		q := e.snap.Load().key.Quota
		if q == nil {
			continue
		}
		qs := &e.quota
		qs.mu.Lock()
		start := q.Period.start(now)
		if qs.period.Load() == start.Unix() {
			if n := qs.block.Swap(0); n > 0 {
				if err := k.backend.ReturnQuota(e.snap.Load().key.ID, start, n); err != nil {
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

// quotaView fills key's quotaUsed and quotaResetsAt from what e knows.
func (e *Entry) quotaView(key *Key, now time.Time) {
	if key.Quota == nil {
		return
	}
	used, reset := e.quotaUsed(key.Quota, now)
	key.QuotaUsed, key.QuotaResetsAt = &used, &reset
}

// quotaUsed is what instances have taken of q in the period of now, less
// this instance's unspent block, and when the next period begins.
func (e *Entry) quotaUsed(q *Quota, now time.Time) (int64, time.Time) {
	start := q.Period.start(now)
	used := int64(0)
	if e.quota.period.Load() == start.Unix() {
		used = max(e.quota.used.Load()-max(e.quota.block.Load(), 0), 0)
	}
	return used, q.Period.next(start)
}

// ReadQuota reads key id's quota use of the current period back from the
// backend (other instances' leases), for an administrator's view.
func (k *Keys) ReadQuota(id string) error {
	e := k.entry(id)
	if e == nil {
		return nil
	}
	q := e.snap.Load().key.Quota
	if q == nil {
		return nil
	}
	start := q.Period.start(k.now())
	used, err := k.backend.QuotaUsed(id, start)
	if err != nil {
		return err
	}
	qs := &e.quota
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qs.period.Load() != start.Unix() {
		qs.block.Store(0)
		qs.spentUntil.Store(0)
		qs.period.Store(start.Unix())
	}
	qs.used.Store(max(used, qs.used.Load()))
	return nil
}

// SyncRates shares this instance's rate-limit counts with the other
// instances of a shared backend and takes theirs; without a RateSharer
// it does nothing. On an error the counts stay to be sent next time, and
// the limits go on from memory.
func (k *Keys) SyncRates(now time.Time) error {
	rs, ok := k.backend.(RateSharer)
	if !ok {
		return nil
	}
	var deltas []RateCount
	limited := false
	for _, e := range k.entries() {
		if s := e.snap.Load(); len(s.key.RateLimits) > 0 {
			limited = true
			deltas = e.limits.pending(s.key.ID, deltas)
		}
	}
	if !limited {
		return nil // no key has a policy: nothing to share
	}
	totals, err := rs.ShareRates(now, deltas)
	if err != nil {
		for _, d := range deltas {
			if e := k.entry(d.KeyID); e != nil {
				e.limits.unsent(d)
			}
		}
		return err
	}
	byKey := make(map[string][]RateCount)
	for _, c := range totals {
		byKey[c.KeyID] = append(byKey[c.KeyID], c)
	}
	ns := now.UnixNano()
	for _, e := range k.entries() {
		if s := e.snap.Load(); len(s.key.RateLimits) > 0 {
			e.limits.apply(byKey[s.key.ID], ns)
		}
	}
	return nil
}

// RateLimitHeaders returns the RateLimit-Policy and RateLimit values for
// the decided key at now (draft-ietf-httpapi-ratelimit-headers-10), both
// empty for a key without rate limits or quota. RateLimit names the
// policy closest to being exhausted.
func (d *Decision) RateLimitHeaders(now time.Time) (policy, current string) {
	if d.Entry == nil {
		return "", ""
	}
	s := d.Entry.snap.Load()
	if s.policyHeader == "" {
		return "", ""
	}
	ns := now.UnixNano()
	i, r, t, frac := d.Entry.limits.closest(ns)
	name := ""
	if i >= 0 {
		name = s.key.RateLimits[i].Name
	}
	if q := s.key.Quota; q != nil {
		used, reset := d.Entry.quotaUsed(q, now)
		qr := max(q.Limit-used, 0)
		if f := float64(qr) / float64(q.Limit); name == "" || f < frac {
			name, r = quotaPolicy, qr
			t = max(int64(reset.Sub(now)+time.Second-1)/int64(time.Second), 0)
		}
	}
	var buf [96]byte
	return s.policyHeader, string(appendRateLimit(buf[:0], name, r, t))
}
