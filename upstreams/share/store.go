package share

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/host"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
)

// Config is what the gateway hands the share store.
type Config struct {
	// DB is the gateway's database, and Backend the share store of its
	// backend (NewBoltBackend, NewPostgresBackend).
	DB      storage.DB
	Backend Backend
	// PublicBaseURL prefixes a share's url: {PublicBaseURL}/s/{uuid}.
	// Empty gives a path-only url.
	PublicBaseURL string
	// CookieKey signs the unlock cookie of the public page (HMAC-SHA256);
	// at least 32 bytes.
	CookieKey []byte
	// Now is the clock; nil means time.Now. Tests pass a fake one.
	Now func() time.Time
	// Logger receives errors the store cannot report to a caller (a failed
	// background flush); nil means no logging.
	Logger *zap.Logger
	// PasswordParams are the Argon2id costs for new passwords; zero means
	// DefaultArgon2Params.
	PasswordParams Argon2Params
	// Events receives the webhook events of shares (events.Share*) in the
	// transaction of each change, a page view's in the transaction of
	// Flush that writes the view down; nil means events.Discard.
	Events events.Sink
	// Idempotency keeps the replies of creates sent with an
	// Idempotency-Key (clients.md); nil: the header is ignored.
	Idempotency *idempotency.Store
	// Host is the issue tracker the shares open: creates and updates
	// are checked against it. Nil: no tracker is connected, and shares
	// are taken as they are sent.
	Host host.Host
}

// Store keeps shares and their activity through its Backend, on bbolt or
// PostgreSQL: the handlers and the viewer do not know which.
type Store struct {
	db        storage.DB
	be        Backend
	baseURL   string
	cookieKey []byte
	now       func() time.Time
	log       *zap.Logger
	hasher    *hasher
	events    events.Sink
	views     *views
	unlocks   *unlockLimiter
	writes    *writeLimiter
	idem      *idempotency.Store
	host      host.Host
}

// NewStore checks cfg.
func NewStore(cfg Config) (*Store, error) {
	if cfg.DB == nil || cfg.Backend == nil {
		return nil, errors.New("share: Config.DB or Config.Backend is nil")
	}
	if len(cfg.CookieKey) < 32 {
		return nil, errors.New("share: Config.CookieKey must be at least 32 bytes")
	}
	base := strings.TrimRight(cfg.PublicBaseURL, "/")
	if base != "" {
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, errors.New("share: Config.PublicBaseURL must be an absolute http or https URL")
		}
	}
	s := &Store{
		db:        cfg.DB,
		be:        cfg.Backend,
		baseURL:   base,
		cookieKey: append([]byte(nil), cfg.CookieKey...),
		now:       cfg.Now,
		log:       cfg.Logger,
		hasher:    newHasher(cfg.PasswordParams),
		events:    cfg.Events,
		idem:      cfg.Idempotency,
		host:      cfg.Host,
	}
	if s.events == nil {
		s.events = events.Discard
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.views = newViews()
	s.unlocks = newUnlockLimiter()
	s.writes = newWriteLimiter()
	return s, nil
}

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// errNoIdentity is a wiring fault: the gateway always sets the identity.
var errNoIdentity = errors.New("share: no caller identity")

func notFound() *problem.Details { return problem.NotFound("no share with this uuid") }

// visible is docs/clients.md's rule: the caller sees the shares it created and
// those of projects it administers ("*": all). An issue share without a
// project is seen by its creator and "*" administrators only.
func visible(caller *access.Identity, createdBy, projectID string) bool {
	return createdBy == caller.Owner || caller.AdminOf(projectID)
}

type ipKey struct{}

// withClientIP carries the API caller's address to the store, for the
// activity entries that API actions write.
func withClientIP(ctx context.Context, ip netip.Addr) context.Context {
	return context.WithValue(ctx, ipKey{}, ip)
}

func clientIPFrom(ctx context.Context) *string {
	if ip, ok := ctx.Value(ipKey{}).(netip.Addr); ok && ip.IsValid() {
		s := ip.String()
		return &s
	}
	return nil
}

// canonicalUUID returns the 16 bytes of s when s is a uuid in its
// canonical lower-case form, the only form share paths use.
func canonicalUUID(s string) ([]byte, bool) {
	u, err := uuid.Parse(s)
	if err != nil || u.String() != s {
		return nil, false
	}
	return u[:], true
}

// loadVisible reads the share named uuidStr that caller may see, or
// answers the 404 a share the caller cannot see gets, as if absent.
func (s *Store) loadVisible(tx storage.Tx, caller *access.Identity, uuidStr string) (*Record, error) {
	r, err := s.loadByUUID(tx, uuidStr)
	if err != nil {
		return nil, err
	}
	if r == nil || !visible(caller, r.CreatedBy, r.ProjectID) {
		return nil, notFound()
	}
	return r, nil
}

// loadByUUID reads the share named uuidStr in tx; nil when absent or not
// a canonical uuid.
func (s *Store) loadByUUID(tx storage.Tx, uuidStr string) (*Record, error) {
	if _, ok := canonicalUUID(uuidStr); !ok {
		return nil, nil
	}
	return s.be.ShareByUUID(tx, uuidStr, false)
}

// loadForUpdate is loadByUUID in a transaction that changes the share:
// on PostgreSQL the row stays locked until tx ends.
func (s *Store) loadForUpdate(tx storage.Tx, uuidStr string) (*Record, error) {
	if _, ok := canonicalUUID(uuidStr); !ok {
		return nil, nil
	}
	return s.be.ShareByUUID(tx, uuidStr, true)
}

// Create validates in, stores the share as caller's and writes the
// activity entry "created". Creates share commits (db.Batch): many at
// once cost few disk syncs, and a returned share is on disk.
func (s *Store) Create(ctx context.Context, caller *access.Identity, in *CreateRequest) (*Share, error) {
	return s.CreateWith(ctx, caller, in, nil)
}

// CreateWith is Create with inTx, when not nil, run last in the
// transaction that stores the share, given the share as the reply shows
// it, for what must commit with it or not at all: an idempotent create's
// stored reply. It may run more than once; an error fails this create
// alone.
func (s *Store) CreateWith(ctx context.Context, caller *access.Identity, in *CreateRequest, inTx func(tx storage.Tx, sh *Share) error) (*Share, error) {
	if caller == nil || caller.Owner == "" {
		return nil, errNoIdentity
	}
	if in == nil {
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the share create body is missing")
	}
	now := s.nowMs()
	var f problem.Fields
	c := validate(in, now, &f)
	if err := s.checkWithHost(ctx, &c, &f); err != nil {
		return nil, err
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	var hash string
	if c.Password.Value != nil {
		h, err := s.hasher.hash(*c.Password.Value)
		if err != nil {
			return nil, err
		}
		hash = h
	}
	u := uuid.New()
	r := &Record{
		UUID: u.String(), CreatedBy: caller.Owner, CreatedAt: now, UpdatedBy: caller.Owner, UpdatedAt: now,
		PasswordHash: hash,
	}
	r.setContent(&c)
	act := Activity{Timestamp: now, Source: activitySource, Action: ActionCreated,
		User: nonEmpty(caller.Owner), IP: clientIPFrom(ctx)}
	err := s.db.Batch(ctx, func(tx storage.Tx) error {
		// Batch may run this again after another batched call failed:
		// everything it sets is set afresh each run.
		if err := s.be.CreateShare(tx, r); err != nil {
			return err
		}
		if err := s.be.AddActivity(tx, r.ID, act); err != nil {
			return err
		}
		sh := r.toShare(s.baseURL, now, 0)
		if inTx != nil {
			if err := inTx(tx, sh); err != nil {
				return err
			}
		}
		return s.emit(tx, events.ShareCreated, sh, now)
	})
	if err != nil {
		return nil, err
	}
	return r.toShare(s.baseURL, now, 0), nil
}

// emit hands the event of a change to sh, made at nowMs, to the Sink in
// tx; its data is sh as the API returns it, which holds no password.
func (s *Store) emit(tx storage.Tx, typ string, sh *Share, nowMs int64) error {
	data, err := json.Marshal(sh)
	if err != nil {
		return err
	}
	return s.events.Emit(tx, events.Event{Type: typ, Owner: sh.CreatedBy, At: time.UnixMilli(nowMs).UTC(), Data: data})
}

// setContent copies the editable fields of c into r (not the password,
// whose rule differs between create and update).
func (r *Record) setContent(c *content) {
	r.Type = c.Type
	r.IssueID = c.IssueID
	r.ProjectID = c.ProjectID
	r.Board = c.Board
	r.JQL = c.JQL
	r.Expiration = c.Expiration
	r.ExpirationExpression = c.ExpirationExpression
	r.FieldsConfig = c.FieldsConfig
	r.SelectedUsersConfig = c.SelectedUsersConfig
}

// Get returns the share named uuidStr if caller may see it, else a 404.
func (s *Store) Get(ctx context.Context, caller *access.Identity, uuidStr string) (*Share, error) {
	if caller == nil {
		return nil, errNoIdentity
	}
	if out, ok, err := s.getNow(ctx, caller, uuidStr); ok || err != nil {
		return out, err
	}
	var out *Share
	err := s.db.View(ctx, func(tx storage.Tx) error {
		r, err := s.loadVisible(tx, caller, uuidStr)
		if err != nil {
			return err
		}
		n, err := s.pending(tx).count(r.ID)
		if err != nil {
			return err
		}
		out = r.toShare(s.baseURL, s.nowMs(), n)
		return nil
	})
	return out, err
}

// getNow is Get in one read outside a transaction (Backend.ShareNow),
// the unflushed openings added as the read transaction would add them.
// ok is false when a flush moved on between the read and the count: Get
// then reads again in a transaction, which settles it.
func (s *Store) getNow(ctx context.Context, caller *access.Identity, uuidStr string) (out *Share, ok bool, err error) {
	if _, valid := canonicalUUID(uuidStr); !valid {
		return nil, true, notFound()
	}
	v := s.views
	v.mu.Lock()
	b := v.inflight
	var mark int64
	if b != nil {
		mark = b.mark
	}
	v.mu.Unlock()
	r, seen, err := s.be.ShareNow(ctx, uuidStr, mark)
	if err != nil {
		return nil, true, err
	}
	if r == nil || !visible(caller, r.CreatedBy, r.ProjectID) {
		return nil, true, notFound()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.inflight != b || (b != nil && b.mark != mark) {
		return nil, false, nil
	}
	n := v.cur.counts[r.ID]
	// A batch not yet begun (mark 0) is not in what the read saw; one
	// whose transaction the read saw is.
	if b != nil && (mark == 0 || !seen) {
		n += b.counts[r.ID]
	}
	return r.toShare(s.baseURL, s.nowMs(), n), true, nil
}

// Update replaces the share named uuidStr with in (docs/clients.md): type,
// issueId and projectId cannot change; an absent password keeps the old
// one, null removes it, a string replaces it; everything else is replaced
// as sent. Writes the activity entry "updated".
func (s *Store) Update(ctx context.Context, caller *access.Identity, uuidStr string, in *CreateRequest) (*Share, error) {
	if caller == nil || caller.Owner == "" {
		return nil, errNoIdentity
	}
	if in == nil {
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the share body is missing")
	}
	now := s.nowMs()
	// Read first: an unseen share is a 404 whatever the body says, and the
	// password is hashed outside any transaction.
	var cur *Record
	err := s.db.View(ctx, func(tx storage.Tx) error {
		r, err := s.loadByUUID(tx, uuidStr)
		cur = r
		return err
	})
	if err != nil {
		return nil, err
	}
	if cur == nil || !visible(caller, cur.CreatedBy, cur.ProjectID) {
		return nil, notFound()
	}
	var f problem.Fields
	c := validate(in, now, &f)
	if s.host != nil && cur.Type == TypeIssue && c.ProjectID == "" {
		c.ProjectID = cur.ProjectID // the issue's project, filled in at create
	}
	if err := s.checkWithHost(ctx, &c, &f); err != nil {
		return nil, err
	}
	checkImmutable(&f, "type", in.Type != "", in.Type, cur.Type)
	checkImmutable(&f, "issueId", true, c.IssueID, cur.IssueID)
	checkImmutable(&f, "projectId", true, c.ProjectID, cur.ProjectID)
	if err := f.Err(); err != nil {
		return nil, err
	}
	var hash string
	if c.Password.Value != nil {
		if hash, err = s.hasher.hash(*c.Password.Value); err != nil {
			return nil, err
		}
	}
	act := Activity{Timestamp: now, Source: activitySource, Action: ActionUpdated,
		User: nonEmpty(caller.Owner), IP: clientIPFrom(ctx)}
	var out *Share
	err = s.db.Batch(ctx, func(tx storage.Tx) error {
		old, err := s.loadForUpdate(tx, uuidStr)
		if err != nil {
			return err
		}
		if old == nil {
			return notFound() // deleted since it was read
		}
		r := *old
		r.setContent(&c)
		switch {
		case !c.Password.Set:
		case c.Password.Value == nil:
			r.PasswordHash = ""
		default:
			r.PasswordHash = hash
		}
		r.UpdatedBy, r.UpdatedAt = caller.Owner, now
		if err := s.be.UpdateShare(tx, old, &r); err != nil {
			return err
		}
		n, err := s.pending(tx).count(r.ID)
		if err != nil {
			return err
		}
		out = r.toShare(s.baseURL, now, n)
		if err := s.be.AddActivity(tx, r.ID, act); err != nil {
			return err
		}
		return s.emit(tx, events.ShareUpdated, out, now)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// checkWithHost checks c against the issue tracker, when one is
// connected and the request is well-formed so far (a bad request is
// refused without asking the tracker).
func (s *Store) checkWithHost(ctx context.Context, c *content, f *problem.Fields) error {
	if s.host == nil || len(f.List()) > 0 {
		return nil
	}
	return checkWithHost(ctx, s.host, c, f)
}

// checkImmutable reports field when the body changes it, unless the field
// already has a violation of its own.
func checkImmutable(f *problem.Fields, field string, check bool, sent, stored string) {
	if !check || sent == stored {
		return
	}
	for _, e := range f.List() {
		if e.Field == field {
			return
		}
	}
	f.Add(field, "immutable", field+" cannot be changed")
}

// Delete removes the share named uuidStr, its index entries and its
// activity.
func (s *Store) Delete(ctx context.Context, caller *access.Identity, uuidStr string) error {
	if caller == nil {
		return errNoIdentity
	}
	// Refuse an unknown or unseen share before joining a batch: an error
	// inside db.Batch makes every call of the batch run again.
	var seen bool
	err := s.db.View(ctx, func(tx storage.Tx) error {
		r, err := s.loadByUUID(tx, uuidStr)
		seen = r != nil && visible(caller, r.CreatedBy, r.ProjectID)
		return err
	})
	if err != nil {
		return err
	}
	if !seen {
		return notFound()
	}
	var id uint64
	now := s.nowMs()
	err = s.db.Batch(ctx, func(tx storage.Tx) error {
		r, err := s.loadForUpdate(tx, uuidStr)
		if err != nil {
			return err
		}
		if r == nil {
			return notFound() // deleted since it was read
		}
		id = r.ID
		// The event shows the share as a get just before would have.
		n, err := s.pending(tx).count(r.ID)
		if err != nil {
			return err
		}
		if err := s.emit(tx, events.ShareDeleted, r.toShare(s.baseURL, now, n), now); err != nil {
			return err
		}
		return s.be.DeleteShare(tx, r)
	})
	if err != nil {
		return err
	}
	s.views.forget(id)
	return nil
}
