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

	"github.com/google/uuid"
	"go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// Config is what the gateway hands the share store.
type Config struct {
	// DB is the gateway's one bbolt file; the store creates its buckets.
	DB *bbolt.DB
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
}

// Store keeps shares and their activity in bbolt. Every bbolt access of
// the package goes through it, so another backend can replace it without
// touching the handlers.
type Store struct {
	db        *bbolt.DB
	baseURL   string
	cookieKey []byte
	now       func() time.Time
	log       *zap.Logger
	hasher    *hasher
	views     *views
	unlocks   *unlockLimiter
}

// NewStore checks cfg and creates the share buckets.
func NewStore(cfg Config) (*Store, error) {
	if cfg.DB == nil {
		return nil, errors.New("share: Config.DB is nil")
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
		baseURL:   base,
		cookieKey: append([]byte(nil), cfg.CookieKey...),
		now:       cfg.Now,
		log:       cfg.Logger,
		hasher:    newHasher(cfg.PasswordParams),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	s.views = newViews()
	s.unlocks = newUnlockLimiter()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, name := range allBuckets() {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// errNoIdentity is a wiring fault: the gateway always sets the identity.
var errNoIdentity = errors.New("share: no caller identity")

func notFound() *problem.Details { return problem.NotFound("no share with this uuid") }

// visible is share.md's rule: the caller sees the shares it created and
// those of projects it administers ("*": all). An issue share without a
// project is seen by its creator and "*" administrators only.
func visible(caller *keystore.Identity, createdBy, projectID string) bool {
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
func loadVisible(tx *bbolt.Tx, caller *keystore.Identity, uuidStr string) (*record, error) {
	r, err := loadByUUID(tx, uuidStr)
	if err != nil {
		return nil, err
	}
	if r == nil || !visible(caller, r.CreatedBy, r.ProjectID) {
		return nil, notFound()
	}
	return r, nil
}

// loadByUUID reads the share named uuidStr in tx; nil when absent.
func loadByUUID(tx *bbolt.Tx, uuidStr string) (*record, error) {
	key, ok := canonicalUUID(uuidStr)
	if !ok {
		return nil, nil
	}
	id := tx.Bucket(bucketShareUUIDs).Get(key)
	if id == nil {
		return nil, nil
	}
	return loadByID(tx, id)
}

// loadByID decodes the record stored under idKey; decoding copies it out
// of the transaction. nil when absent.
func loadByID(tx *bbolt.Tx, idKey []byte) (*record, error) {
	v := tx.Bucket(bucketShares).Get(idKey)
	if v == nil {
		return nil, nil
	}
	r := new(record)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, err
	}
	return r, nil
}

// putShare writes r with its uuid entry and index entries.
func putShare(tx *bbolt.Tx, r *record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketShares).Put(u64(r.ID), v); err != nil {
		return err
	}
	return putIndexes(tx, r)
}

// appendFill is the page fill of buckets whose keys only grow: bbolt's
// default (half-full pages, for random inserts) would double their size.
const appendFill = 0.9

// appendOnly sets the fill of the buckets a create appends to: the shares
// by id and the id- and time-ordered indexes of all shares.
func appendOnly(tx *bbolt.Tx) {
	tx.Bucket(bucketShares).FillPercent = appendFill
	for o := range numOrders {
		tx.Bucket(indexBuckets[dimAll][o]).FillPercent = appendFill
	}
}

// Create validates in, stores the share as caller's and writes the
// activity entry "created". Creates share commits (db.Batch): many at
// once cost few disk syncs, and a returned share is on disk.
func (s *Store) Create(ctx context.Context, caller *keystore.Identity, in *CreateRequest) (*Share, error) {
	if caller == nil || caller.Owner == "" {
		return nil, errNoIdentity
	}
	if in == nil {
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the share create body is missing")
	}
	now := s.nowMs()
	var f problem.Fields
	c := validate(in, now, &f)
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
	r := &record{
		UUID: u.String(), CreatedBy: caller.Owner, CreatedAt: now, UpdatedBy: caller.Owner, UpdatedAt: now,
		PasswordHash: hash,
	}
	r.setContent(&c)
	act := Activity{Timestamp: now, Source: activitySource, Action: ActionCreated,
		User: nonEmpty(caller.Owner), IP: clientIPFrom(ctx)}
	err := s.db.Batch(func(tx *bbolt.Tx) error {
		// Batch may run this again after another batched call failed:
		// everything it sets is set afresh each run.
		uuids := tx.Bucket(bucketShareUUIDs)
		if uuids.Get(u[:]) != nil {
			return errors.New("share: uuid collision")
		}
		appendOnly(tx)
		id, err := tx.Bucket(bucketShares).NextSequence()
		if err != nil {
			return err
		}
		r.ID = id
		if err := uuids.Put(u[:], u64(id)); err != nil {
			return err
		}
		if err := putShare(tx, r); err != nil {
			return err
		}
		if err := adjustCounts(tx, r, 1); err != nil {
			return err
		}
		return appendActivity(tx, id, act)
	})
	if err != nil {
		return nil, err
	}
	return r.toShare(s.baseURL, now, 0), nil
}

// setContent copies the editable fields of c into r (not the password,
// whose rule differs between create and update).
func (r *record) setContent(c *content) {
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
func (s *Store) Get(ctx context.Context, caller *keystore.Identity, uuidStr string) (*Share, error) {
	if caller == nil {
		return nil, errNoIdentity
	}
	var out *Share
	err := s.db.View(func(tx *bbolt.Tx) error {
		r, err := loadVisible(tx, caller, uuidStr)
		if err != nil {
			return err
		}
		out = r.toShare(s.baseURL, s.nowMs(), s.views.pendingCount(tx.ID(), r.ID))
		return nil
	})
	return out, err
}

// Update replaces the share named uuidStr with in (share.md): type,
// issueId and projectId cannot change; an absent password keeps the old
// one, null removes it, a string replaces it; everything else is replaced
// as sent. Writes the activity entry "updated".
func (s *Store) Update(ctx context.Context, caller *keystore.Identity, uuidStr string, in *CreateRequest) (*Share, error) {
	if caller == nil || caller.Owner == "" {
		return nil, errNoIdentity
	}
	if in == nil {
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the share body is missing")
	}
	now := s.nowMs()
	// Read first: an unseen share is a 404 whatever the body says, and the
	// password is hashed outside any transaction.
	var cur *record
	err := s.db.View(func(tx *bbolt.Tx) error {
		r, err := loadByUUID(tx, uuidStr)
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
	var out *record
	var txID int
	err = s.db.Batch(func(tx *bbolt.Tx) error {
		txID = tx.ID()
		old, err := loadByUUID(tx, uuidStr)
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
		if err := deleteIndexes(tx, old); err != nil {
			return err
		}
		if err := putShare(tx, &r); err != nil {
			return err
		}
		out = &r
		return appendActivity(tx, r.ID, act)
	})
	if err != nil {
		return nil, err
	}
	return out.toShare(s.baseURL, now, s.views.pendingCount(txID, out.ID)), nil
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
func (s *Store) Delete(ctx context.Context, caller *keystore.Identity, uuidStr string) error {
	if caller == nil {
		return errNoIdentity
	}
	// Refuse an unknown or unseen share before joining a batch: an error
	// inside db.Batch makes every call of the batch run again.
	var seen bool
	err := s.db.View(func(tx *bbolt.Tx) error {
		r, err := loadByUUID(tx, uuidStr)
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
	err = s.db.Batch(func(tx *bbolt.Tx) error {
		r, err := loadByUUID(tx, uuidStr)
		if err != nil {
			return err
		}
		if r == nil {
			return notFound() // deleted since it was read
		}
		id = r.ID
		key, _ := canonicalUUID(r.UUID)
		if err := tx.Bucket(bucketShareUUIDs).Delete(key); err != nil {
			return err
		}
		if err := tx.Bucket(bucketShares).Delete(u64(r.ID)); err != nil {
			return err
		}
		if err := deleteIndexes(tx, r); err != nil {
			return err
		}
		if err := adjustCounts(tx, r, -1); err != nil {
			return err
		}
		return deleteActivity(tx, r.ID)
	})
	if err != nil {
		return err
	}
	s.views.forget(id)
	return nil
}
