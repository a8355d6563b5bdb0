package keystore

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
	"github.com/keygate/keygate/keystore/traffic"
)

// Plan is a named set of rate-limit policies and a quota that keys and
// consumers take by planId (docs/administrators.md, Consumers and plans):
// changing the plan changes every holder at once. A key counts its plan's
// policies as its own; a consumer counts its plan's for all its keys.
type Plan struct {
	ID                   string              `json:"id"`
	Name                 string              `json:"name"`
	Description          string              `json:"description"`
	RateLimits           []traffic.RateLimit `json:"rateLimits"`
	Quota                *traffic.Quota      `json:"quota"`
	CreationTime         time.Time           `json:"creationTime"`
	LastModificationTime time.Time           `json:"lastModificationTime"`
}

// Consumer is a named client that holds keys: its rate limits and quota,
// its own and its plan's, are shared by all its keys.
type Consumer struct {
	ID string `json:"id"`
	// Name says who the client is (1 to 100 characters).
	Name string `json:"name"`
	// ExternalID is the client's id elsewhere (a Kong consumer's
	// custom_id), unique among consumers; nil: none.
	ExternalID           *string             `json:"externalId"`
	Description          string              `json:"description"`
	RateLimits           []traffic.RateLimit `json:"rateLimits"`
	Quota                *traffic.Quota      `json:"quota"`
	PlanID               *string             `json:"planId"`
	CreationTime         time.Time           `json:"creationTime"`
	LastModificationTime time.Time           `json:"lastModificationTime"`
	// QuotaUsed and QuotaResetsAt show the consumer's quota (its own or
	// its plan's) in the current period; KeyCount how many keys it holds.
	// Shown, never stored.
	QuotaUsed     *int64     `json:"quotaUsed,omitempty"`
	QuotaResetsAt *time.Time `json:"quotaResetsAt,omitempty"`
	KeyCount      int        `json:"keyCount"`
}

// consumerPolicy prefixes a consumer's policies in violatedPolicies and
// the RateLimit headers, apart from the key's own of the same name.
const consumerPolicy = "consumer:"

// PlanInput is the body of a plan create or update.
type PlanInput struct {
	Name        patch.Field[string]            `json:"name"`
	Description patch.Field[string]            `json:"description"`
	RateLimits  patch.Field[[]json.RawMessage] `json:"rateLimits"`
	Quota       patch.Field[json.RawMessage]   `json:"quota"`
}

// ConsumerInput is the body of a consumer create or update.
type ConsumerInput struct {
	Name        patch.Field[string]            `json:"name"`
	ExternalID  patch.Field[string]            `json:"externalId"`
	Description patch.Field[string]            `json:"description"`
	RateLimits  patch.Field[[]json.RawMessage] `json:"rateLimits"`
	Quota       patch.Field[json.RawMessage]   `json:"quota"`
	PlanID      patch.Field[string]            `json:"planId"`
}

const (
	// MaxScopeNameLen is the longest name of a plan or consumer, in runes.
	MaxScopeNameLen  = 100
	maxExternalIDLen = 255
)

var (
	// ErrPlanNotFound and ErrConsumerNotFound are the 404s of unknown ids.
	ErrPlanNotFound     = problem.NotFound("no plan with this id")
	ErrConsumerNotFound = problem.NotFound("no consumer with this id")
	// ErrConsumerHasKeys refuses the delete of a consumer that still holds
	// keys: its limits would silently stop binding them.
	ErrConsumerHasKeys = conflict("id", "the consumer still holds keys: delete them or move them to another consumer first")
	// ErrPlanInUse refuses the delete of a plan that keys or consumers
	// still take.
	ErrPlanInUse = conflict("id", "the plan is assigned to keys or consumers: assign them another plan (or none) first")
	// ErrExternalIDTaken refuses a second consumer with the same
	// externalId.
	ErrExternalIDTaken = conflict("externalId", "another consumer has this externalId")
	// ErrPlanNameTaken refuses a second plan of the same name.
	ErrPlanNameTaken = conflict("name", "another plan has this name")
)

// conflict is a 409 naming field.
func conflict(field, msg string) *problem.Details {
	d := problem.New(http.StatusConflict, problem.CodeConflict, msg)
	d.Errors = []problem.FieldError{{Field: field, Code: "conflict", Message: msg}}
	return d
}

// unknownRef is the 400 of a planId or consumerId that names nothing.
func unknownRef(field, what string) error {
	return problem.Invalid([]problem.FieldError{{Field: field, Code: "unknown", Message: fmt.Sprintf("no %s has this id", what)}})
}

// applyPlan checks in against plan p (a create when p.ID is empty) and
// returns the changed plan.
func applyPlan(p Plan, in *PlanInput) (Plan, error) {
	var f problem.Fields
	create := p.ID == ""
	checkScopeName(&f, in.Name, create, &p.Name)
	checkScopeDescription(&f, in.Description, &p.Description)
	applyLimits(&f, in.RateLimits, in.Quota, &p.RateLimits, &p.Quota)
	return p, f.Err()
}

// applyConsumer checks in against consumer c (a create when c.ID is
// empty) and returns the changed consumer; planId is checked by the
// caller, which knows the plans.
func applyConsumer(c Consumer, in *ConsumerInput) (Consumer, error) {
	var f problem.Fields
	create := c.ID == ""
	checkScopeName(&f, in.Name, create, &c.Name)
	checkScopeDescription(&f, in.Description, &c.Description)
	if in.ExternalID.Set {
		c.ExternalID = nil
		switch v := in.ExternalID.Value; {
		case in.ExternalID.Null:
		case !text.PrintableASCII(v, maxExternalIDLen) || untrimmed(v):
			f.Add("externalId", "invalid", "externalId must be 1 to 255 printable US-ASCII characters, not beginning or ending with a space, or null")
		default:
			c.ExternalID = &v
		}
	}
	applyLimits(&f, in.RateLimits, in.Quota, &c.RateLimits, &c.Quota)
	if in.PlanID.Set {
		c.PlanID = optionalID(in.PlanID)
	}
	return c, f.Err()
}

func checkScopeName(f *problem.Fields, in patch.Field[string], create bool, name *string) {
	switch {
	case !in.Set && create, in.Set && in.Null:
		f.Add("name", "required", "name is required: 1 to 100 printable characters")
	case !in.Set:
	case !text.Printable(in.Value, MaxScopeNameLen) || untrimmed(in.Value):
		f.Add("name", "invalid", "name must be 1 to 100 printable characters, not beginning or ending with a space")
	default:
		*name = in.Value
	}
}

// untrimmed reports whether s begins or ends with white space: "gold"
// and "gold " would be two plans that every list shows alike.
func untrimmed(s string) bool { return strings.TrimSpace(s) != s }

func checkScopeDescription(f *problem.Fields, in patch.Field[string], d *string) {
	if !in.Set {
		return
	}
	if text.CheckDescription(f, in.Value) {
		*d = in.Value
	}
}

// PlanCheck checks a key or consumer against its plan as a write's
// transaction reads it (nil: the plan is gone): the clash rule.
type PlanCheck func(p *Plan) error

// HoldersCheck checks a plan against the keys and consumers that take it,
// as a write's transaction reads them: the clash rule.
type HoldersCheck func(holders []Holder) error

// Holder is a key or consumer as the clash rule reads it: its own
// policies, and who it is, for the message.
type Holder struct {
	Kind       string              `json:"-"` // "key" or "consumer"
	ID         string              `json:"id"`
	Name       string              `json:"name"`
	RateLimits []traffic.RateLimit `json:"rateLimits"`
	Quota      *traffic.Quota      `json:"quota"`
}

// holderOf decodes the stored record of a key or consumer (kind) as a
// Holder: both hold these fields under these names.
func holderOf(kind string, record []byte) (Holder, error) {
	h := Holder{Kind: kind}
	if err := json.Unmarshal(record, &h); err != nil {
		return Holder{}, fmt.Errorf("a stored %s does not decode: %w", kind, err)
	}
	return h, nil
}

// holderClash is the PlanCheck of a key's or consumer's write: its own
// policies against its plan's, fields named as checkClash names them.
func holderClash(limits []traffic.RateLimit, quota *traffic.Quota, ownSent, quotaSent bool) PlanCheck {
	return func(p *Plan) error {
		var f problem.Fields
		checkClash(&f, limits, quota, p, ownSent, quotaSent)
		return f.Err()
	}
}

// checkClash names, in f, each policy of own (the holder's rateLimits and
// quota) that plan p carries too: the two would be counted as one name
// in the headers and violatedPolicies. ownSent tells whether the holder's
// policies came with this request (the field to name); otherwise the
// planId did.
func checkClash(f *problem.Fields, limits []traffic.RateLimit, quota *traffic.Quota, p *Plan, ownSent, quotaSent bool) {
	if p == nil {
		return
	}
	for i, l := range limits {
		if !slices.ContainsFunc(p.RateLimits, func(q traffic.RateLimit) bool { return q.Name == l.Name }) {
			continue
		}
		field := "planId"
		if ownSent {
			field = fmt.Sprintf("rateLimits[%d].name", i)
		}
		f.Add(field, "clashes", fmt.Sprintf("policy %q is named by plan %q too: give one of them another name", l.Name, p.Name))
	}
	if quota != nil && p.Quota != nil {
		field := "planId"
		if quotaSent {
			field = "quota"
		}
		f.Add(field, "clashes", fmt.Sprintf("plan %q carries a quota already: a holder has one quota, its own or its plan's", p.Name))
	}
}

// effective is what a holder counts: its own policies and its plan's,
// and its own quota or its plan's.
func effective(limits []traffic.RateLimit, quota *traffic.Quota, p *Plan) ([]traffic.RateLimit, *traffic.Quota) {
	if p == nil {
		return limits, quota
	}
	out := append(slices.Clip(limits), p.RateLimits...)
	if quota == nil {
		quota = p.Quota
	}
	return out, quota
}

// applyLimits checks and applies the rateLimits and quota fields of a
// key's, plan's or consumer's input: null (or []) removes them.
func applyLimits(f *problem.Fields, rl patch.Field[[]json.RawMessage], q patch.Field[json.RawMessage], limits *[]traffic.RateLimit, quota **traffic.Quota) {
	if rl.Set {
		*limits = nil
		if !rl.Null {
			*limits = traffic.CheckRateLimits(f, rl.Value)
		}
	}
	if q.Set {
		*quota = nil
		if !q.Null {
			*quota = traffic.CheckQuota(f, q.Value)
		}
	}
}
