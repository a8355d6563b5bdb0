package traffic

import (
	"context"
	"time"

	"github.com/keygate/keygate/internal/storage"
)

// Store keeps what instances share of each holder's limits, under the
// holder's id: the quota periods, leased in blocks. keystore's backends
// implement it, on bbolt and PostgreSQL.
type Store interface {
	// LeaseQuota takes up to want of holder id's quota limit for the
	// period span, in one transaction, never beyond limit. The lease
	// that takes the period's last unit runs emit in it, once per
	// period (the holder's quota_exhausted event).
	LeaseQuota(ctx context.Context, id string, span QuotaSpan, limit, want int64, emit func(storage.Tx) error) (QuotaLease, error)
	// ReturnQuota gives back n units of the period, unspent.
	ReturnQuota(ctx context.Context, id string, span QuotaSpan, n int64) error
	// QuotaUsed reads what instances have taken of the period's quota.
	QuotaUsed(ctx context.Context, id string, span QuotaSpan) (int64, error)
}

// RateSharer is a Store that instances share rate-limit counts
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
	// Demand is, for each policy of each holder, what the instances seen
	// lately were asked in their last sync interval, added up.
	Demand []RateCount
	// Instances is how many instances shared counts lately, this one
	// included (at least 1).
	Instances int
}
