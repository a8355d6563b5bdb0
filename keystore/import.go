package keystore

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/problem"
)

// Importing keys: many keys in one call, each with the fields of a create
// and, when it has one, the token it already has on another gateway, so
// that a client keeps its secret when an operator moves to keygate. An
// import is all or nothing: every key is checked first, every problem is
// reported with the line it came from, and the keys are stored in one
// transaction (Backend.PutMany) only when none has one.

// MaxImport bounds the keys of one import.
const MaxImport = 20000

// Foreign token bounds: a token of another gateway is 16 to 512 printable
// US-ASCII characters. A token of our own form (TokenPrefix) must pass our
// checks instead.
const (
	minForeignToken = 16
	maxForeignToken = 512
)

// ImportKey is one key of an import.
type ImportKey struct {
	// Line is where the key is in its source (1-based), for the report.
	Line int
	// Input holds the fields of a create.
	Input KeyInput
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
// never holds a token.
type ImportReport struct {
	Imported int  `json:"imported"`
	DryRun   bool `json:"dryRun"`
	// Kept counts the keys that keep the token they came with; the rest
	// got a new one, which `reveal` shows.
	Kept int           `json:"keptTokens"`
	Keys []ImportedKey `json:"keys"`
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
	Line    int     `json:"line"`
	ID      string  `json:"id"`
	Service Service `json:"service"`
	Name    string  `json:"name"`
	Owner   string  `json:"owner"`
	// NewToken marks a key that came without a token and got one of
	// keygate's, which `reveal` shows.
	NewToken bool `json:"newToken,omitempty"`
}

// ErrTokenTaken is an import whose token another instance stored while
// it ran: nothing was imported.
var ErrTokenTaken = problem.New(409, problem.CodeConflict, "a token of the import was stored meanwhile: nothing was imported; check the file again")

// foreignToken reports whether token may be another gateway's: not of
// our form, and 16 to 512 printable US-ASCII characters without spaces
// (a bearer token has none).
func foreignToken(token string) bool {
	if len(token) < minForeignToken || len(token) > maxForeignToken || hasTokenPrefix(token) {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func hasTokenPrefix(token string) bool {
	return len(token) >= len(TokenPrefix) && token[:len(TokenPrefix)] == TokenPrefix
}

// maxImportProblems bounds the problems an import reports: a file that
// is wrong throughout says so in a readable reply.
const maxImportProblems = 1000

// Import checks keys and, unless dryRun, stores them all at once. A key
// with a problem makes the whole import a 400 that lists every problem
// as lines[N].field, after the problems of reading the file (prior, as
// the parsers return them); nothing is stored then. Imports run one at a
// time, so that two cannot give one token to two keys.
func (k *Keys) Import(keys []ImportKey, dryRun bool, prior error) (ImportReport, error) {
	k.importMu.Lock()
	defer k.importMu.Unlock()
	var f problem.Fields
	var pd *problem.Details
	if errors.As(prior, &pd) {
		for _, e := range pd.Errors {
			f.Add(e.Field, e.Code, e.Message)
		}
	} else if prior != nil {
		return ImportReport{}, prior
	}
	if len(keys) == 0 && prior == nil {
		f.Add("keys", "required", "the import holds no key")
		return ImportReport{}, f.Err()
	}
	if len(keys) > MaxImport {
		f.Add("keys", "too_many", "an import holds at most "+strconv.Itoa(MaxImport)+" keys; split the file")
		return ImportReport{}, f.Err()
	}
	now := k.now().UTC().Truncate(time.Millisecond)
	recs := make([]*record, 0, len(keys))
	tokens := make([]string, 0, len(keys))
	lines := make([]int, 0, len(keys))
	seen := make(map[TokenHash]int, len(keys))
	k.mu.RLock()
	for i := range keys {
		in := &keys[i]
		where := "lines[" + strconv.Itoa(in.Line) + "]"
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
				f.Add(where+"."+e.Field, e.Code, quietValues(e.Message))
			}
		} else if err != nil {
			k.mu.RUnlock()
			return ImportReport{}, err
		}
		token := in.Token
		switch {
		case token == "":
			token = NewToken()
		case hasTokenPrefix(token) && !wellFormedToken(token):
			f.Add(tokenAt, "invalid", "a token that starts with "+TokenPrefix+" must be a well-formed keygate token")
			continue
		case !hasTokenPrefix(token) && !foreignToken(token):
			f.Add(tokenAt, "invalid", fmt.Sprintf("a token is %d to %d printable US-ASCII characters without spaces", minForeignToken, maxForeignToken))
			continue
		}
		h := HashToken(token)
		if first, dup := seen[h]; dup {
			f.Add(tokenAt, "duplicate", "the same token as line "+strconv.Itoa(first))
			continue
		}
		seen[h] = in.Line
		if k.byHash[h] != nil {
			f.Add(tokenAt, "exists", "a key with this token exists already")
			continue
		}
		key.ID = uuid.NewString()
		key.CreationTime, key.LastModificationTime = now, now
		key.TokenPrefix = tokenPrefixOf(token)
		recs = append(recs, &record{Key: key, TokenHash: h[:], SealedToken: k.sealer.Seal([]byte(token), []byte(key.ID))})
		tokens = append(tokens, in.Token)
		lines = append(lines, in.Line)
	}
	k.mu.RUnlock()
	if err := f.Err(); err != nil {
		return ImportReport{}, capProblems(err)
	}
	report := ImportReport{Imported: len(recs), DryRun: dryRun, Keys: make([]ImportedKey, 0, len(recs)), Skipped: []SkippedConsumer{}}
	for i, rec := range recs {
		if tokens[i] != "" {
			report.Kept++
		}
		report.Keys = append(report.Keys, ImportedKey{Line: lines[i], ID: rec.ID, Service: rec.Service, Name: rec.Name, Owner: rec.Owner, NewToken: tokens[i] == ""})
	}
	if dryRun {
		return report, nil
	}
	if err := k.backend.PutMany(recs); err != nil {
		return ImportReport{}, err
	}
	born := k.resyncs.Load()
	k.mu.Lock()
	for _, rec := range recs {
		e := k.newEntry(rec, Usage{})
		e.born = born
		var h TokenHash
		copy(h[:], rec.TokenHash)
		k.byHash[h] = e
		k.byID[rec.ID] = e
	}
	k.mu.Unlock()
	return report, nil
}

// quotedValue is a quoted value in a problem's message: one of 16
// characters or more may be a token put in the wrong field, and an
// import never says a token back.
var quotedValue = regexp.MustCompile(`"[^"]{16,}"`)

// quietValues replaces the long quoted values of msg.
func quietValues(msg string) string {
	return quotedValue.ReplaceAllString(msg, `"(a value of 16 characters or more)"`)
}

// capProblems keeps the first maxImportProblems problems of err (a 400
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
	if len(d.Errors) <= maxImportProblems {
		return err
	}
	more := len(d.Errors) - maxImportProblems
	errs := append(d.Errors[:maxImportProblems:maxImportProblems], problem.FieldError{Field: "lines", Code: "too_many",
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

// RedactPath replaces the segments of a request path that are tokens:
// keygate's by their form (RedactTokens), another gateway's imported
// ones by being a key's token here. For the audit log, off the request
// path: a segment of 16 to 512 characters costs a hash.
func (k *Keys) RedactPath(path string) string {
	path = RedactTokens(path)
	var b strings.Builder
	changed := false
	for i := 0; i < len(path); {
		j := strings.IndexByte(path[i:], '/')
		end := len(path)
		if j >= 0 {
			end = i + j
		}
		seg := path[i:end]
		if len(seg) >= minForeignToken && len(seg) <= maxForeignToken && !hasTokenPrefix(seg) && k.Lookup(HashToken(seg)) != nil {
			if !changed {
				b.WriteString(path[:i])
				changed = true
			}
			b.WriteString("[redacted]")
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

// tokenPrefixOf is what a key shows of its token: our TokenPrefix and 9
// characters of the random part, or of a foreign token its first 4
// characters, a quarter of the shortest one, so that a short secret is
// not half shown.
func tokenPrefixOf(token string) string {
	if hasTokenPrefix(token) {
		return token[:12]
	}
	return token[:4]
}
