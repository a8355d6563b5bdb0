// Package keystore holds API keys: their model and rules, token handling,
// persistence, the in-memory lookup index with usage counters, and the
// authorization decision with what a request spends of its key's and
// consumer's limits (their windows and quota blocks are
// keystore/traffic's). It knows nothing of Caddy.
package keystore

import (
	"encoding/json"
	"net/netip"
	"sync"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore/traffic"
)

// Key is an API key as administrators see it (docs/administrators.md, Keys). The token
// itself is never part of it, except once in the reply to a create.
type Key struct {
	ID                   string             `json:"id"`
	Service              access.Service     `json:"service"`
	Name                 string             `json:"name"`
	Description          string             `json:"description"`
	Owner                string             `json:"owner"`
	Privileges           []access.Privilege `json:"privileges"`
	NotValidBefore       *time.Time         `json:"notValidBefore"`
	NotValidAfter        *time.Time         `json:"notValidAfter"`
	AllowedIPs           []string           `json:"allowedIps"`
	AdminProjects        []string           `json:"adminProjects,omitempty"`
	CreationTime         time.Time          `json:"creationTime"`
	LastModificationTime time.Time          `json:"lastModificationTime"`
	LastUsageTime        *time.Time         `json:"lastUsageTime"`
	UsageCount           uint64             `json:"usageCount"`
	TokenPrefix          string             `json:"tokenPrefix"`
	// Enabled is false for a key switched off: refused 401 key_disabled,
	// everything else kept, until it is enabled again.
	Enabled bool `json:"enabled"`
	// PreviousTokenExpiry is when the token a roll replaced stops
	// working; null once it has (or when the key was never rolled with
	// a grace period).
	PreviousTokenExpiry *time.Time `json:"previousTokenExpiry"`
	// RateLimits are the key's named rate-limit policies (at most 4).
	RateLimits []traffic.RateLimit `json:"rateLimits"`
	// Quota bounds the key's requests per calendar period; nil: none.
	Quota *traffic.Quota `json:"quota"`
	// QuotaUsed is what the key has spent of its quota this period and
	// QuotaResetsAt when the next period begins; shown, never stored.
	QuotaUsed     *int64     `json:"quotaUsed"`
	QuotaResetsAt *time.Time `json:"quotaResetsAt"`
	// ConsumerID names the consumer the key belongs to: the consumer's
	// limits bind all its keys together. Nil: none.
	ConsumerID *string `json:"consumerId"`
	// PlanID names the plan whose policies the key counts as its own.
	PlanID *string `json:"planId"`
	// Token is set only in the reply to a create.
	Token string `json:"token,omitempty"`
}

// Scopes returns the ids of the key's consumer and plan, "" for none.
func (k *Key) Scopes() (consumerID, planID string) {
	if k.ConsumerID != nil {
		consumerID = *k.ConsumerID
	}
	if k.PlanID != nil {
		planID = *k.PlanID
	}
	return consumerID, planID
}

// Record is a key as it is persisted, what a Backend stores and loads:
// the administrators' view plus the token's lookup hash and its sealed
// form. Usage lives apart (Usage), since it changes far more often than
// the key.
type Record struct {
	Key
	TokenHash   []byte `json:"tokenHash"`
	SealedToken []byte `json:"sealedToken"`
	// Disabled is what is stored of Enabled: records written before keys
	// could be disabled lack it and so load enabled.
	Disabled bool `json:"disabled,omitempty"`
	// PreviousTokenHash is the lookup hash of the token the last roll
	// replaced, valid until Key.PreviousTokenExpiry.
	PreviousTokenHash []byte `json:"previousTokenHash,omitempty"`
	// ExpiryWarnedFor is the notValidAfter that key.expiring was sent
	// for: once per key and end of validity, on every instance.
	ExpiryWarnedFor *time.Time `json:"expiryWarnedFor,omitempty"`
}

// storedRecord is Record without its JSON methods.
type storedRecord Record

// stored is r as it is stored: Enabled as Disabled.
func (r *Record) stored() *storedRecord {
	s := storedRecord(*r)
	s.Disabled = !r.Enabled
	return &s
}

// MarshalJSON stores Enabled as Disabled.
func (r Record) MarshalJSON() ([]byte, error) { return json.Marshal(r.stored()) }

// UnmarshalJSON reads Enabled from Disabled, whatever "enabled" says.
func (r *Record) UnmarshalJSON(b []byte) error {
	rec, err := decodeRecord(b)
	if err != nil {
		return err
	}
	*r = *rec
	return nil
}

// decodeRecord reads a stored record, decoding its fields straight
// into a storedRecord: json.Unmarshal into a Record would scan the bytes
// three times (to check them, to skip the value, then UnmarshalJSON's
// own pass), and a resync decodes every key.
func decodeRecord(raw []byte) (*Record, error) {
	rec := new(Record)
	if err := json.Unmarshal(raw, (*storedRecord)(rec)); err != nil {
		return nil, err
	}
	rec.Enabled = !rec.Disabled
	return rec, nil
}

// encodeRecordValue is what is stored of rec, without the pass over
// MarshalJSON's output that json.Marshal of a Record makes.
func encodeRecordValue(rec *Record) ([]byte, error) { return json.Marshal(rec.stored()) }

// Usage is a key's usage as flushed to storage.
type Usage struct {
	KeyID     string
	Count     uint64
	LastUsage time.Time // zero: never used
	// Hours are the requests per hour and outcome to add (AddUsage).
	Hours []HourCount
}

// compiled is an immutable snapshot of a key in the form the key check
// reads: parsed ranges and a privilege bitmask, so a request allocates
// nothing to check them.
type compiled struct {
	key    Key
	hash   token.Hash
	sealed []byte
	// prevHash is the replaced token's hash, which answers until
	// prevUntil (hasPrev false: none).
	prevHash  token.Hash
	prevUntil time.Time
	hasPrev   bool
	// warnedFor is the record's ExpiryWarnedFor, kept across changes.
	warnedFor *time.Time
	prefixes  []netip.Prefix
	// restricted is set when the key lists addresses at all: a listed
	// entry that fails to parse narrows the key, it never opens it to all.
	restricted bool
	privs      uint8
	// identities holds one Identity per operation name, made on first use,
	// so an authorized request allocates none.
	identities sync.Map
	// limits and quota are what the key counts: its own policies and its
	// plan's, its own quota or its plan's.
	limits []traffic.RateLimit
	quota  *traffic.Quota
	// consumer is the consumer the key belongs to, nil for none: its
	// meter is shared by all its keys.
	consumer *consumerEntry
	// policyHeader is the RateLimit-Policy value of every policy the key
	// is held to, its consumer's included; empty without any.
	policyHeader string
}

func privBit(p access.Privilege) uint8 {
	switch p {
	case access.PrivGet:
		return 1 << 0
	case access.PrivSearch:
		return 1 << 1
	case access.PrivCreate:
		return 1 << 2
	case access.PrivArchive:
		return 1 << 3
	case access.PrivDelete:
		return 1 << 4
	case access.PrivList:
		return 1 << 5
	}
	return 0
}

// compile is rec in the form the key check reads, with its plan and its
// consumer as they are in memory now.
func (k *Keys) compile(rec *Record) *compiled {
	c := &compiled{key: rec.Key, sealed: rec.SealedToken, warnedFor: rec.ExpiryWarnedFor}
	var plan *Plan
	if k != nil {
		k.scopeMu.RLock()
		if rec.PlanID != nil {
			plan = k.plans[*rec.PlanID]
		}
		if rec.ConsumerID != nil {
			c.consumer = k.consumers[*rec.ConsumerID]
		}
		k.scopeMu.RUnlock()
	}
	c.limits, c.quota = effective(rec.RateLimits, rec.Quota, plan)
	copy(c.hash[:], rec.TokenHash)
	if len(rec.PreviousTokenHash) == len(c.prevHash) && rec.PreviousTokenExpiry != nil {
		copy(c.prevHash[:], rec.PreviousTokenHash)
		c.prevUntil, c.hasPrev = *rec.PreviousTokenExpiry, true
	}
	c.key.Token = ""
	c.key.QuotaUsed, c.key.QuotaResetsAt = nil, nil
	c.policyHeader = traffic.PolicyHeader("", c.limits, c.quota)
	if c.consumer != nil {
		c.policyHeader = traffic.JoinHeader(c.policyHeader, c.consumer.snap.Load().header)
	}
	for _, p := range rec.Privileges {
		c.privs |= privBit(p)
	}
	c.restricted = len(rec.AllowedIPs) > 0
	for _, s := range rec.AllowedIPs {
		if p, ok := parseRange(s); ok {
			c.prefixes = append(c.prefixes, p)
		}
	}
	return c
}

// parseRange reads an address or CIDR range as a prefix; a plain address
// is a range of one. IPv4-mapped IPv6 forms are read as the IPv4 they map,
// since client addresses are compared unmapped.
func parseRange(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		a, bits := p.Addr(), p.Bits()
		if a.Is4In6() {
			// ::ffff:a.b.c.d/n is the IPv4 range a.b.c.d/(n-96); a shorter
			// prefix reaches beyond the mapped space and is refused.
			if bits < 96 {
				return netip.Prefix{}, false
			}
			a, bits = a.Unmap(), bits-96
		}
		p = netip.PrefixFrom(a, bits).Masked()
		return p, p.IsValid()
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), true
	}
	return netip.Prefix{}, false
}

// revision is the Revision of the record c was compiled from.
func (c *compiled) revision() Revision { return revisionOf(c.key.LastModificationTime, c.warnedFor) }

// hashes are the lookup hashes that lead to the key: its token's, and the
// replaced token's while it may still answer.
func (c *compiled) hashes() []token.Hash {
	if c.hasPrev {
		return []token.Hash{c.hash, c.prevHash}
	}
	return []token.Hash{c.hash}
}

// has reports whether the snapshot holds privilege p.
func (c *compiled) has(p access.Privilege) bool { return c.privs&privBit(p) != 0 }

// allows reports whether ip may use the key: any address when the list is
// empty, else one inside a listed range.
func (c *compiled) allows(ip netip.Addr) bool {
	if !c.restricted {
		return true
	}
	// A zone (fe80::1%eth0) names the link, not the host: compare the
	// address, as netip.Prefix.Contains never matches a zoned one.
	ip = ip.Unmap().WithZone("")
	for _, p := range c.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
