package keystore

import (
	"context"

	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore/traffic"
)

// Importing keys: many keys in one call, each with the fields of a create
// and, when it has one, the token it already has on another gateway, so
// that a client keeps its secret when an operator moves to keygate. A
// decK dump brings its consumers along, as consumers whose limits bind
// all their keys together, and the consumer groups that limit them, as
// plans. An import is all or nothing: everything is checked first, every
// problem is reported with the line it came from, and the plans,
// consumers and keys are stored in one transaction (Backend.PutMany)
// only when none has one.

// MaxImport bounds the keys of one import.
const MaxImport = 20000

// MaxImportBody bounds the file of one import as the admin API takes it
// (POST /webapi/keys/import) and `caddy webapi keys import` reads it:
// MaxImport keys of a few hundred bytes each.
const MaxImportBody = 64 << 20

// Foreign token bounds: a token of another gateway is 16 to 512 printable
// US-ASCII characters. A token of our own form (token.Prefix) must pass our
// checks instead.
const (
	MinForeignToken = 16
	maxForeignToken = 512
)

// ImportSet is what one import brings: keys and, from a decK dump, the
// consumers they belong to and the plans those take.
type ImportSet struct {
	Plans     []ImportPlan
	Consumers []ImportConsumer
	Keys      []ImportKey
	// Skipped are the consumers of a decK dump that gave no key.
	Skipped []SkippedConsumer
}

// ImportPlan is a plan of an import (a consumer group of Kong's).
type ImportPlan struct {
	// Line is where it is in its source, for problems and the report.
	Line  int
	Input PlanInput
}

// ImportConsumer is a consumer of an import (a consumer of Kong's).
type ImportConsumer struct {
	Line int
	// Input holds the fields of a create but planId: Plan names the plan.
	Input ConsumerInput
	// Plan is the index in ImportSet.Plans of the plan the consumer
	// takes, plus one; 0: none.
	Plan int
	// Note says, for the report, what the import made of the consumer
	// that its source did not say outright.
	Note string
}

// ImportKey is one key of an import.
type ImportKey struct {
	// Line is where the key is in its source (1-based), for the report.
	Line int
	// Input holds the fields of a create.
	Input KeyInput
	// Consumer is the index in ImportSet.Consumers of the consumer the
	// key belongs to, plus one; 0: none of the import's (a line of JSON
	// Lines may name a stored consumer by consumerId).
	Consumer int
	// Token is the token the key already has; empty for a new token.
	Token string
	// TokenField names the token in the source's words, for problems:
	// "token" (JSON Lines) when empty, "key" for a Kong credential.
	TokenField string
	// NoGrant marks a key whose service and privileges its source could
	// not tell and has reported why (a Kong consumer's groups): Import
	// checks its other fields and its token, so that one reply names
	// every problem, and does not report the missing service again.
	NoGrant bool
}

// ImportReport says what an import stored, or would store (DryRun). It
// never holds a token. On a dry run the ids are those the new plans,
// consumers and keys would get; nothing has them.
type ImportReport struct {
	Imported int  `json:"imported"`
	DryRun   bool `json:"dryRun"`
	// Kept counts the keys that keep the token they came with; the rest
	// got a new one, which `reveal` shows.
	Kept int           `json:"keptTokens"`
	Keys []ImportedKey `json:"keys"`
	// Consumers and Plans are those the keys belong to and take, new or
	// found (Existing); empty for JSON Lines.
	Consumers []ImportedConsumer `json:"consumers"`
	Plans     []ImportedPlan     `json:"plans"`
	// Skipped are the consumers of a decK dump that gave no key.
	Skipped []SkippedConsumer `json:"skipped"`
}

// SkippedConsumer is a consumer of a decK dump that gave no key, and why.
type SkippedConsumer struct {
	Line     int    `json:"line"`
	Consumer string `json:"consumer"`
	Reason   string `json:"reason"`
}

// ImportedKey is a key of the report: where it came from and what it is,
// without any part of its token.
type ImportedKey struct {
	Line    int            `json:"line"`
	ID      string         `json:"id"`
	Service access.Service `json:"service"`
	Name    string         `json:"name"`
	Owner   string         `json:"owner"`
	// ConsumerID is the consumer the key belongs to, if any.
	ConsumerID *string `json:"consumerId"`
	// NewToken marks a key that came without a token and got one of
	// keygate's, which `reveal` shows.
	NewToken bool `json:"newToken,omitempty"`
}

// ImportedConsumer is a consumer of the report.
type ImportedConsumer struct {
	Line       int     `json:"line"`
	ID         string  `json:"id"`
	Name       string  `json:"name"`
	ExternalID *string `json:"externalId"`
	PlanID     *string `json:"planId"`
	// Keys counts the import's keys that belong to it.
	Keys int `json:"keys"`
	// Existing marks a consumer stored before, with the externalId, rate
	// limits, quota and plan the import gives it: it gets the keys, and
	// nothing of it changes.
	Existing bool   `json:"existing"`
	Note     string `json:"note,omitempty"`
}

// ImportedPlan is a plan of the report.
type ImportedPlan struct {
	Line int    `json:"line"`
	ID   string `json:"id"`
	Name string `json:"name"`
	// Consumers counts the import's consumers that take it.
	Consumers int `json:"consumers"`
	// Existing marks a plan stored before, of the same name, rate limits
	// and quota: the import's consumers take it, and it does not change.
	Existing bool `json:"existing"`
}

// ErrTokenTaken is an import whose token another instance stored while
// it ran: nothing was imported.
var ErrTokenTaken = problem.New(409, problem.CodeConflict, "a token of the import was stored meanwhile: nothing was imported; check the file again")

// foreignToken reports whether token may be another gateway's: not of
// our form, and 16 to 512 printable US-ASCII characters without spaces
// (a bearer token has none).
func foreignToken(tok string) bool {
	if len(tok) < MinForeignToken || len(tok) > maxForeignToken || hasTokenPrefix(tok) {
		return false
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func hasTokenPrefix(tok string) bool {
	return len(tok) >= len(token.Prefix) && tok[:len(token.Prefix)] == token.Prefix
}

// MaxImportProblems bounds the problems an import reports: a file that
// is wrong throughout says so in a readable reply.
const MaxImportProblems = 1000

// lineAt is the field of a problem at line n of the source.
func lineAt(n int) string { return "lines[" + strconv.Itoa(n) + "]" }

// addProblems adds the field problems of err, a check's, at where; any
// other error is returned.
func addProblems(f *problem.Fields, where string, err error) error {
	var d *problem.Details
	if !errors.As(err, &d) {
		return err
	}
	for _, e := range d.Errors {
		f.Add(where+"."+e.Field, e.Code, QuietValues(e.Message))
	}
	return nil
}

// lineClash is check with the fields of its problem under where (the
// holder's line), as the import names every problem.
func lineClash(where string, check PlanCheck) PlanCheck {
	return func(p *Plan) error {
		var f problem.Fields
		if err := addProblems(&f, where, check(p)); err != nil {
			return err
		}
		return f.Err()
	}
}

// Import checks set and, unless dryRun, stores it all at once: its plans,
// its consumers, its keys. Anything with a problem makes the whole
// import a 400 that lists every problem as lines[N].field, after the
// problems of reading the file (prior, as the parsers return them);
// nothing is stored then. Imports run one at a time, so that two cannot
// give one token to two keys, and hold writeMu, so that a resync cannot
// miss the plans and consumers between their commit and memory.
func (k *Keys) Import(set ImportSet, dryRun bool, prior error) (ImportReport, error) {
	k.importMu.Lock()
	defer k.importMu.Unlock()
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	var f problem.Fields
	var pd *problem.Details
	if errors.As(prior, &pd) {
		for _, e := range pd.Errors {
			f.Add(e.Field, e.Code, e.Message)
		}
	} else if prior != nil {
		return ImportReport{}, prior
	}
	keys := set.Keys
	if len(keys) == 0 && prior == nil {
		f.Add("keys", "required", "the import holds no key")
		return ImportReport{}, f.Err()
	}
	if len(keys) > MaxImport {
		f.Add("keys", "too_many", "an import holds at most "+strconv.Itoa(MaxImport)+" keys; split the file")
		return ImportReport{}, f.Err()
	}
	now := k.now().UTC().Truncate(time.Millisecond)
	report := ImportReport{DryRun: dryRun, Consumers: []ImportedConsumer{}, Plans: []ImportedPlan{}, Skipped: set.Skipped}
	if report.Skipped == nil {
		report.Skipped = []SkippedConsumer{}
	}
	plans, newPlans, err := k.importPlans(&f, set.Plans, now, &report)
	if err != nil {
		return ImportReport{}, err
	}
	// Each new consumer's and key's check of its plan, run again by the
	// backend in the write's transaction (another instance may change
	// the plan meanwhile).
	clash := map[string]PlanCheck{}
	consumers, newConsumers, err := k.importConsumers(&f, set.Consumers, plans, now, &report, clash)
	if err != nil {
		return ImportReport{}, err
	}
	recs := make([]*Record, 0, len(keys))
	tokens := make([]string, 0, len(keys))
	lines := make([]int, 0, len(keys))
	seen := make(map[token.Hash]int, len(keys))
	k.mu.RLock()
	for i := range keys {
		in := &keys[i]
		where := lineAt(in.Line)
		tokenAt := where + ".token"
		if in.TokenField != "" {
			tokenAt = where + "." + in.TokenField
		}
		key, err := applyCreate(&in.Input)
		var fe *problem.Details
		if errors.As(err, &fe) {
			for _, e := range fe.Errors {
				if in.NoGrant && prior != nil && (e.Field == "service" || strings.HasPrefix(e.Field, "privileges")) {
					continue
				}
				f.Add(where+"."+e.Field, e.Code, QuietValues(e.Message))
			}
		} else if err != nil {
			k.mu.RUnlock()
			return ImportReport{}, err
		}
		if in.Consumer > 0 {
			// The import's own consumer, checked above; stored with the key.
			if c := consumers[in.Consumer-1]; c != nil {
				key.ConsumerID = &c.ID
				report.Consumers[in.Consumer-1].Keys++
			}
		} else {
			err := k.checkKeyScopes(&key)
			if err == nil && key.PlanID != nil {
				err = holderClash(key.RateLimits, key.Quota, in.Input.RateLimits.Set, in.Input.Quota.Set)(k.plan(*key.PlanID))
			}
			if err := addProblems(&f, where, err); err != nil {
				k.mu.RUnlock()
				return ImportReport{}, err
			}
		}
		tok := in.Token
		switch {
		case tok == "":
			tok = token.New()
		case hasTokenPrefix(tok) && !token.WellFormed(tok):
			f.Add(tokenAt, "invalid", "a token that starts with "+token.Prefix+" must be a well-formed keygate token")
			continue
		case !hasTokenPrefix(tok) && !foreignToken(tok):
			f.Add(tokenAt, "invalid", fmt.Sprintf("a token is %d to %d printable US-ASCII characters without spaces", MinForeignToken, maxForeignToken))
			continue
		}
		h := token.HashOf(tok)
		if first, dup := seen[h]; dup {
			f.Add(tokenAt, "duplicate", "the same token as line "+strconv.Itoa(first))
			continue
		}
		seen[h] = in.Line
		if k.byHash.get(h) != nil {
			f.Add(tokenAt, "exists", "a key with this token exists already")
			continue
		}
		key.ID = uuid.NewString()
		key.CreationTime, key.LastModificationTime = now, now
		key.TokenPrefix = tokenPrefixOf(tok)
		if key.PlanID != nil {
			clash[key.ID] = lineClash(where, holderClash(key.RateLimits, key.Quota, in.Input.RateLimits.Set, in.Input.Quota.Set))
		}
		recs = append(recs, &Record{Key: key, TokenHash: h[:], SealedToken: k.sealer.Seal([]byte(tok), []byte(key.ID))})
		tokens = append(tokens, in.Token)
		lines = append(lines, in.Line)
	}
	k.mu.RUnlock()
	if err := f.Err(); err != nil {
		return ImportReport{}, capProblems(err)
	}
	report.Imported = len(recs)
	report.Keys = make([]ImportedKey, 0, len(recs))
	for i, rec := range recs {
		if tokens[i] != "" {
			report.Kept++
		}
		report.Keys = append(report.Keys, ImportedKey{Line: lines[i], ID: rec.ID, Service: rec.Service, Name: rec.Name, Owner: rec.Owner,
			ConsumerID: cloneID(rec.ConsumerID), NewToken: tokens[i] == ""})
	}
	if dryRun {
		return report, nil
	}
	if err := k.backend.PutMany(context.Background(), &Batch{Plans: newPlans, Consumers: newConsumers, Keys: recs, Clash: clash}); err != nil {
		return ImportReport{}, err
	}
	// Plans before the consumers that take them, consumers before the
	// keys that belong to them: each is compiled with what it names.
	k.scopeMu.Lock()
	for _, p := range newPlans {
		k.plans[p.ID] = p
	}
	for _, c := range newConsumers {
		k.setConsumer(c)
	}
	k.scopeMu.Unlock()
	born := k.resyncs.Load()
	k.mu.Lock()
	for _, rec := range recs {
		e := k.newEntry(rec, Usage{})
		e.born = born
		var h token.Hash
		copy(h[:], rec.TokenHash)
		k.byHash.put(h, e)
		k.byID[rec.ID] = e
	}
	k.mu.Unlock()
	return report, nil
}

// importPlans checks the plans of an import. A plan of the same name
// stored before is taken as it is when its rate limits and quota are the
// import's, so that the parts of a dump split in several imports share
// their plans; with other limits it is a problem, never changed. It
// returns each plan (nil for one with a problem) and the new ones, and
// adds them to the report.
func (k *Keys) importPlans(f *problem.Fields, in []ImportPlan, now time.Time, report *ImportReport) (plans []*Plan, fresh []*Plan, err error) {
	plans = make([]*Plan, len(in))
	byName := map[string]int{}
	k.scopeMu.RLock()
	stored := make(map[string]*Plan, len(k.plans))
	for _, p := range k.plans {
		stored[p.Name] = p
	}
	k.scopeMu.RUnlock()
	for i := range in {
		where := lineAt(in[i].Line)
		p, err := applyPlan(Plan{}, &in[i].Input)
		if err := addProblems(f, where, err); err != nil {
			return nil, nil, err
		}
		if err != nil {
			continue
		}
		if first, dup := byName[p.Name]; dup {
			f.Add(where+".name", "duplicate", fmt.Sprintf("plan %s is in the import twice (line %d)", ShownName(p.Name, in[i].Line), in[first].Line))
			continue
		}
		byName[p.Name] = i
		if old := stored[p.Name]; old != nil {
			if !samePolicies(old.RateLimits, old.Quota, p.RateLimits, p.Quota) {
				f.Add(where+".name", "exists", fmt.Sprintf("plan %s exists already with other rate limits or quota: rename one of them, or give them the same limits", ShownName(p.Name, in[i].Line)))
				continue
			}
			plans[i] = old
			report.Plans = append(report.Plans, ImportedPlan{Line: in[i].Line, ID: old.ID, Name: old.Name, Existing: true})
			continue
		}
		p.ID = uuid.NewString()
		p.CreationTime, p.LastModificationTime = now, now
		plans[i] = &p
		fresh = append(fresh, &p)
		report.Plans = append(report.Plans, ImportedPlan{Line: in[i].Line, ID: p.ID, Name: p.Name})
	}
	return plans, fresh, nil
}

// importConsumers checks the consumers of an import with their plans
// (plans, as importPlans returned them). A consumer stored before with
// the same externalId is given the keys when its rate limits, quota and
// plan are the import's; with others it is a problem, never changed.
// It returns each consumer (nil for one with a problem) and the new
// ones, and adds each to the report, in order.
func (k *Keys) importConsumers(f *problem.Fields, in []ImportConsumer, plans []*Plan, now time.Time, report *ImportReport, clash map[string]PlanCheck) (consumers []*Consumer, fresh []*Consumer, err error) {
	consumers = make([]*Consumer, len(in))
	byExternal := map[string]int{}
	k.scopeMu.RLock()
	stored := make(map[string]Consumer)
	for _, ce := range k.consumers {
		if c := ce.snap.Load().consumer; c.ExternalID != nil {
			stored[*c.ExternalID] = c
		}
	}
	k.scopeMu.RUnlock()
	for i := range in {
		where := lineAt(in[i].Line)
		report.Consumers = append(report.Consumers, ImportedConsumer{Line: in[i].Line, Note: in[i].Note})
		before := len(f.List())
		c, err := applyConsumer(Consumer{}, &in[i].Input)
		if err := addProblems(f, where, err); err != nil {
			return nil, nil, err
		}
		var plan *Plan
		if n := in[i].Plan; n > 0 {
			if plan = plans[n-1]; plan == nil {
				continue // the plan's problem is reported
			}
			c.PlanID = &plan.ID
			// Never stored: the holder of a plan counts its policies and
			// the plan's under one name each.
			if err := addProblems(f, where, holderClash(c.RateLimits, c.Quota, true, true)(plan)); err != nil {
				return nil, nil, err
			}
		}
		if len(f.List()) > before {
			continue
		}
		rep := &report.Consumers[i]
		if c.ExternalID != nil {
			ext := *c.ExternalID
			if first, dup := byExternal[ext]; dup {
				f.Add(where+".externalId", "duplicate", fmt.Sprintf("the same externalId as the consumer at line %d", in[first].Line))
				continue
			}
			byExternal[ext] = i
			if old, ok := stored[ext]; ok {
				if !samePolicies(old.RateLimits, old.Quota, c.RateLimits, c.Quota) || !sameID(old.PlanID, c.PlanID) {
					f.Add(where+".externalId", "exists", fmt.Sprintf("consumer %s has this externalId already, with other rate limits, quota or plan: make them the same, or give it the keys by hand", storedConsumer(&old)))
					continue
				}
				consumers[i] = &old
				rep.ID, rep.Name, rep.ExternalID, rep.PlanID, rep.Existing = old.ID, old.Name, cloneID(old.ExternalID), cloneID(old.PlanID), true
				countHolder(report, plan)
				continue
			}
		}
		c.ID = uuid.NewString()
		c.CreationTime, c.LastModificationTime = now, now
		consumers[i] = &c
		fresh = append(fresh, &c)
		if c.PlanID != nil {
			clash[c.ID] = lineClash(where, holderClash(c.RateLimits, c.Quota, true, true))
		}
		rep.ID, rep.Name, rep.ExternalID, rep.PlanID = c.ID, c.Name, cloneID(c.ExternalID), cloneID(c.PlanID)
		countHolder(report, plan)
	}
	return consumers, fresh, nil
}

// countHolder counts one more consumer of plan in the report.
func countHolder(report *ImportReport, plan *Plan) {
	if plan == nil {
		return
	}
	for i := range report.Plans {
		if report.Plans[i].ID == plan.ID {
			report.Plans[i].Consumers++
			return
		}
	}
}

// samePolicies reports whether two holders' rate limits (in any order)
// and quotas are the same.
func samePolicies(la []traffic.RateLimit, qa *traffic.Quota, lb []traffic.RateLimit, qb *traffic.Quota) bool {
	if len(la) != len(lb) || (qa == nil) != (qb == nil) || qa != nil && *qa != *qb {
		return false
	}
	for _, l := range la {
		if !slices.Contains(lb, l) {
			return false
		}
	}
	return true
}

// sameID reports whether two optional ids are the same.
func sameID(a, b *string) bool {
	return a == nil && b == nil || a != nil && b != nil && *a == *b
}

// A quoted value in a problem's message, as %q writes it: one of 16
// characters or more may be a token put in the wrong field, and an
// import never says a token back. quotedValue pairs the quotes from the
// left, so that the text between two short values ("minute" is named by
// plan "gold") is not taken for one; anyQuoted is any span between two
// quotes, for a message whose quotes do not pair.
var (
	quotedValue = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	anyQuoted   = regexp.MustCompile(`"[^"]{16,}"`)
)

const quietValue = `"(a value of 16 characters or more)"`

// QuietValues replaces the long quoted values of msg, for any message an
// import reports (the importers' too).
func QuietValues(msg string) string {
	quietOf := func(q string) string {
		if Sayable(q[1 : len(q)-1]) {
			return q
		}
		return quietValue
	}
	quiet := quotedValue.ReplaceAllStringFunc(msg, quietOf)
	// A quote left unpaired (a value with a quote in it, not written with
	// %q) leaves the pairing in doubt: then every long span between two
	// quotes goes, readable or not.
	if strings.Count(quotedValue.ReplaceAllString(quiet, ""), `"`) > 0 {
		quiet = anyQuoted.ReplaceAllStringFunc(quiet, quietOf)
	}
	return quiet
}

// hyphenatedWords is lowercase words joined by hyphens, as Kong names its
// plugins (request-transformer) and operators name groups: no token has
// that form.
var hyphenatedWords = regexp.MustCompile(`^[a-z]+(?:-[a-z]+)+$`)

// Sayable reports whether an import may say v back in a message: v has
// fewer than MinForeignToken characters, or is lowercase words joined by
// hyphens. Any other value that long may be a token in the wrong field.
func Sayable(v string) bool {
	return len(v) < MinForeignToken || hyphenatedWords.MatchString(v)
}

// ShownName is how an import's message names a thing of its file (a
// consumer, a consumer group): by its name, or by its line where it has
// none or one it may not say back (Sayable).
func ShownName(name string, line int) string {
	if name == "" || !Sayable(name) {
		return "at line " + strconv.Itoa(line)
	}
	return name
}

// storedConsumer names a stored consumer in an import's message: by its
// name and id, or its id alone where its name is one an import never
// says back.
func storedConsumer(c *Consumer) string {
	if !Sayable(c.Name) {
		return c.ID
	}
	return c.Name + " (" + c.ID + ")"
}

// capProblems keeps the first MaxImportProblems problems of err (a 400
// problem) and says how many more there are.
func capProblems(err error) error {
	var d *problem.Details
	if !errors.As(err, &d) {
		return err
	}
	// In the file's order, whichever check found them: those of no line
	// (the privileges map, the format) first.
	slices.SortStableFunc(d.Errors, func(a, b problem.FieldError) int {
		return cmp.Compare(problemLine(a.Field), problemLine(b.Field))
	})
	if len(d.Errors) <= MaxImportProblems {
		return err
	}
	more := len(d.Errors) - MaxImportProblems
	errs := append(d.Errors[:MaxImportProblems:MaxImportProblems], problem.FieldError{Field: "lines", Code: "too_many",
		Message: strconv.Itoa(more) + " more problems are not listed: fix these and try again"})
	out := problem.Invalid(errs)
	return out
}

// problemLine is the N of a field lines[N]..., 0 for another field.
func problemLine(field string) int {
	rest, ok := strings.CutPrefix(field, "lines[")
	if !ok {
		return 0
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0
	}
	n, _ := strconv.Atoi(rest[:end])
	return n
}

// RedactPath replaces what in a request path is a token: keygate's by
// their form (token.Redact), another gateway's imported ones by being a
// key's token here, as a whole segment or as a piece of one between
// characters such tokens rarely hold (`Bearer X`, `X.json`, `x;X`). For
// the audit log, off the request path: a segment or piece of 16 to 512
// characters costs a hash.
func (k *Keys) RedactPath(path string) string {
	path = token.Redact(path)
	var b strings.Builder
	changed := false
	for i := 0; i < len(path); {
		j := strings.IndexByte(path[i:], '/')
		end := len(path)
		if j >= 0 {
			end = i + j
		}
		seg := path[i:end]
		if red, ok := k.redactSegment(seg); ok {
			if !changed {
				b.WriteString(path[:i])
				changed = true
			}
			b.WriteString(red)
		} else if changed {
			b.WriteString(seg)
		}
		if j < 0 {
			break
		}
		if changed {
			b.WriteByte('/')
		}
		i = end + 1
	}
	if !changed {
		return path
	}
	return b.String()
}

// pieceBreaks are the characters between which RedactPath looks for an
// imported token inside a segment.
const pieceBreaks = " ;,.:=+&@!$'()*"

// redactSegment returns seg with the imported tokens in it redacted, and
// whether there was one.
func (k *Keys) redactSegment(seg string) (string, bool) {
	if k.isImportedToken(seg) {
		return "[redacted]", true
	}
	if !strings.ContainsAny(seg, pieceBreaks) {
		return seg, false
	}
	var b strings.Builder
	written, start := 0, 0 // seg[:written] is in b; the piece begins at start
	for i := 0; i <= len(seg); i++ {
		if i < len(seg) && strings.IndexByte(pieceBreaks, seg[i]) < 0 {
			continue
		}
		if k.isImportedToken(seg[start:i]) {
			b.WriteString(seg[written:start])
			b.WriteString("[redacted]")
			written = i
		}
		start = i + 1
	}
	if written == 0 {
		return seg, false
	}
	b.WriteString(seg[written:])
	return b.String(), true
}

// isImportedToken reports whether s is the token of a key imported from
// another gateway.
func (k *Keys) isImportedToken(s string) bool {
	return len(s) >= MinForeignToken && len(s) <= maxForeignToken && !hasTokenPrefix(s) && k.Lookup(token.HashOf(s)) != nil
}

// tokenPrefixOf is what a key shows of its token: our token.Prefix and 9
// characters of the random part, or of a foreign token its first 4
// characters, a quarter of the shortest one, so that a short secret is
// not half shown.
func tokenPrefixOf(token string) string {
	if hasTokenPrefix(token) {
		return token[:12]
	}
	return token[:4]
}
