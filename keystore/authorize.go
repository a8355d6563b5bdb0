package keystore

import (
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/token"
)

// Request is what the key check looks at.
type Request struct {
	Service access.Service
	// Authorization holds every Authorization header value of the request.
	Authorization []string
	// ClientIP is the address Caddy decided on (client_ip).
	ClientIP     netip.Addr
	Method, Path string
	Now          time.Time
}

// Decision is the outcome of the key check. Reason is empty when the use
// is authorized; otherwise it is the problem code of the refusal and
// Status its HTTP status.
type Decision struct {
	Status    int
	Reason    string
	Entry     *Entry            // the key, once the token is known
	Operation *access.Operation // the operation, once the route is known
	Allow     []string          // for 405
	// Missing is the privilege the key lacks (for the 403's scope).
	Missing access.Privilege
	// PreviousToken is set when the token is the one a roll replaced,
	// still in its grace period (audited as such).
	PreviousToken bool
	// PreviousTokenExpired is set on an invalid_key refusal of the token
	// a roll replaced, once its grace period has ended (until the key is
	// rolled again), so the client can be told to use the new token.
	PreviousTokenExpired bool
	// Violated names the policies that refused a rate_limited or
	// quota_exceeded request; RetryAfter is the whole seconds a 429 or
	// 503 asks the client to wait.
	Violated   []string
	RetryAfter int64
}

// Authorized reports whether the use is allowed.
func (d *Decision) Authorized() bool { return d.Reason == "" }

// Key returns the snapshot of the decided key, or nil.
func (d *Decision) Key() *Key {
	if d.Entry == nil {
		return nil
	}
	return &d.Entry.snap.Load().key
}

// Authorize runs the key check's steps in order against table, with
// lookup finding a key by token hash. It spends what the key may spend:
// a unit of each rate-limit policy and of the quota once the key, its
// validity and the client address pass (kept when the route or the
// privilege then refuses: the request was the key's to make). It
// changes nothing else: counting the use is the caller's, once it
// decides to hand the request on.
func Authorize(req *Request, table *access.Table, lookup func(token.Hash) *Entry) Decision {
	// 1. The header.
	if len(req.Authorization) == 0 {
		return refuse(http.StatusUnauthorized, problem.CodeMissingKey)
	}
	tok, ok := bearerToken(req.Authorization)
	if !ok {
		return refuse(http.StatusUnauthorized, problem.CodeInvalidKey)
	}
	// 2. The key.
	var e *Entry
	var h token.Hash
	if token.WellFormed(tok) || foreignToken(tok) {
		h = token.HashOf(tok)
		e = lookup(h)
	}
	if e == nil {
		return refuse(http.StatusUnauthorized, problem.CodeInvalidKey)
	}
	s := e.snap.Load()
	if s.key.Service != req.Service {
		return refuse(http.StatusUnauthorized, problem.CodeInvalidKey)
	}
	d := Decision{Entry: e}
	// The token a roll replaced answers until its grace period ends.
	if h != s.hash {
		if !s.hasPrev || h != s.prevHash {
			return refuse(http.StatusUnauthorized, problem.CodeInvalidKey)
		}
		if !req.Now.Before(s.prevUntil) {
			d := refuse(http.StatusUnauthorized, problem.CodeInvalidKey)
			d.PreviousTokenExpired = true
			return d
		}
		d.PreviousToken = true
	}
	// A key switched off, as fast as a deleted one.
	if !s.key.Enabled {
		return d.refuse(http.StatusUnauthorized, problem.CodeKeyDisabled)
	}
	// 3. The validity window, bounds included.
	if (s.key.NotValidBefore != nil && req.Now.Before(*s.key.NotValidBefore)) ||
		(s.key.NotValidAfter != nil && req.Now.After(*s.key.NotValidAfter)) {
		return d.refuse(http.StatusUnauthorized, problem.CodeKeyNotValid)
	}
	// 4. The client address.
	if !s.allows(req.ClientIP) {
		return d.refuse(http.StatusForbidden, problem.CodeIPNotAllowed)
	}
	// 4½. What the key may spend: its rate limits and its quota, before
	// the privilege and the handler, so a refused request reads nothing.
	if s.policyHeader != "" {
		if d = e.spend(d, s, req.Now); d.Reason != "" {
			return d
		}
	}
	// 5. The route.
	op, allow := table.Match(req.Method, req.Path)
	if op == nil {
		if len(allow) == 0 {
			return d.refuse(http.StatusNotFound, problem.CodeNotFound)
		}
		d.Allow = allow
		return d.refuse(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed)
	}
	d.Operation = op
	// 6. The privilege.
	if !s.has(op.Privilege) {
		d.Missing = op.Privilege
		return d.refuse(http.StatusForbidden, problem.CodeMissingPrivilege)
	}
	return d
}

func refuse(status int, reason string) Decision { return Decision{Status: status, Reason: reason} }

func (d Decision) refuse(status int, reason string) Decision {
	d.Status, d.Reason = status, reason
	return d
}

// bearerToken reads the one "Bearer <token>" header; the scheme is
// case-insensitive, and more than one header is refused.
func bearerToken(values []string) (string, bool) {
	if len(values) != 1 {
		return "", false
	}
	v := values[0]
	const scheme = "bearer "
	if len(v) <= len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", false
	}
	token := strings.TrimSpace(v[len(scheme):])
	return token, token != ""
}

// Identity returns who the authorized use acts for.
func (d *Decision) Identity() *access.Identity {
	s := d.Entry.snap.Load()
	op := ""
	if d.Operation != nil {
		op = d.Operation.Name
	}
	if id, ok := s.identities.Load(op); ok {
		return id.(*access.Identity)
	}
	consumer, plan := s.key.Scopes()
	id, _ := s.identities.LoadOrStore(op, &access.Identity{
		ConsumerID:    consumer,
		PlanID:        plan,
		KeyID:         s.key.ID,
		KeyName:       s.key.Name,
		Owner:         s.key.Owner,
		Service:       s.key.Service,
		Privileges:    s.key.Privileges,
		AdminProjects: s.key.AdminProjects,
		Operation:     op,
	})
	return id.(*access.Identity)
}
