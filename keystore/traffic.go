package keystore

import (
	"errors"
	"net/http"
	"time"

	"github.com/keygate/keygate/internal/problem"
)

// RateSharer is a Backend that instances share rate-limit counts
// through. ShareRates, in one transaction and one at a time across
// instances: adds each delta to its window's count, records this
// instance's demand of each policy (a RateCount's Count, without an
// Index; each one replaces the instance's last), marks instance as seen
// at now, reads every instance's counts of the windows still current at
// now (this one and the one before, for each policy), the demands and
// the instances seen within live of now, hands them to claim, and adds
// the changes claim returns (this instance's claims) as well.
type RateSharer interface {
	ShareRates(now time.Time, instance string, live time.Duration, deltas, demand []RateCount, claim func(RateShare) []RateCount) error
}

// RateShare is what a sync of rate-limit counts reads back.
type RateShare struct {
	Counts []RateCount
	// Demand is, for each policy of each key, what the instances seen
	// lately were asked in their last sync interval, added up.
	Demand []RateCount
	// Instances is how many instances shared counts lately, this one
	// included (at least 1).
	Instances int
}

// claimsHold is how long an instance goes on by its last claims when it
// cannot sync, at the least, before it spends its share of the limit
// from its own counts.
const claimsHold = 10 * time.Second

// maxAhead bounds how far on a claim reckons the room: a falling
// previous window frees room as time passes, which an instance claims
// for its next interval, but never for more than a usual interval.
const maxAhead = 100 * time.Millisecond

// minInstanceLive is how long an instance that stopped syncing still
// counts among those sharing a limit, at the least: a killed instance
// holds the others to their shares for that long.
const minInstanceLive = 3 * time.Second

// spend runs step 4½ of the key check, what the key may spend: its rate
// limits, then its quota. Nothing of it asks the database but a quota
// whose block is empty.
func (e *Entry) spend(d Decision, s *compiled, now time.Time) Decision {
	ns := now.UnixNano()
	if len(s.key.RateLimits) > 0 {
		if r := e.limits.take(ns, e.sharing(ns)); r.violated != 0 {
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

// sharing is how e's instance stands with the others at ns: how many
// share its limits, and whether its claims of the last sync still hold
// (a few sync intervals; then the database is taken to be away).
func (e *Entry) sharing(ns int64) sharing {
	if e.keys == nil {
		return sharing{instances: 1}
	}
	n := e.keys.instances.Load()
	return sharing{instances: n, claims: n > 1 && ns < e.keys.claimsUntil.Load()}
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
	var deltas, demand []RateCount
	limited := false
	for _, e := range k.entries() {
		if s := e.snap.Load(); len(s.key.RateLimits) > 0 {
			limited = true
			deltas, demand = e.limits.pending(s.key.ID, deltas, demand)
		}
	}
	if !limited {
		return nil // no key has a policy: nothing to share
	}
	// An instance counts while it syncs; three missed syncs and it is gone.
	ns := now.UnixNano()
	live, ahead := minInstanceLive, int64(0)
	if last := k.lastRateSync.Swap(ns); last > 0 && ns > last {
		live = max(live, 3*time.Duration(ns-last))
		// A claim is reckoned with the room as it will be at the next
		// sync, at most maxAhead on: a burst spends a claim at once, and
		// a sync delayed by load must not make it claim the room of
		// seconds to come (measured: 118 through against 100).
		ahead = min(ns-last, int64(maxAhead))
	}
	err := rs.ShareRates(now, k.instance, live, deltas, demand, func(share RateShare) []RateCount {
		n := int64(max(share.Instances, 1))
		k.instances.Store(n)
		counts, demands := byKey(share.Counts), byKey(share.Demand)
		var claims []RateCount
		for _, e := range k.entries() {
			if s := e.snap.Load(); len(s.key.RateLimits) > 0 {
				e.limits.apply(counts[s.key.ID], ns)
				claims = e.limits.reclaim(s.key.ID, ns, sharing{instances: n, claims: n > 1, ahead: ahead}, demands[s.key.ID], claims)
			}
		}
		return claims
	})
	if err != nil {
		for _, d := range deltas {
			if e := k.entry(d.KeyID); e != nil {
				e.limits.unsent(d)
			}
		}
		for _, e := range k.entries() {
			e.limits.dropClaims()
		}
		return err
	}
	// The claims hold from here: the transaction that made them (once or
	// run again) has committed.
	for _, e := range k.entries() {
		e.limits.commitClaims()
	}
	// Claims hold a while without a sync: an instance that falls back
	// to its share while the others still claim could spend what they
	// claim too, so only a long silence (the database away) ends them,
	// not a sync delayed by load.
	k.claimsUntil.Store(ns + int64(max(claimsHold, live)))
	return nil
}

// byKey groups list by key id.
func byKey(list []RateCount) map[string][]RateCount {
	m := make(map[string][]RateCount)
	for _, c := range list {
		m[c.KeyID] = append(m[c.KeyID], c)
	}
	return m
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
	i, r, t, frac := d.Entry.limits.closest(ns, d.Entry.sharing(ns))
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
