package keystore

import (
	"errors"
	"net/http"
	"time"

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
