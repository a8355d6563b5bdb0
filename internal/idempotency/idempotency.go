// Package idempotency makes the creates of the APIs safe to retry
// (clients.md, "Idempotency-Key"; IETF draft-ietf-httpapi-idempotency-key-header).
// The first reply to a POST that carries an Idempotency-Key (status,
// Location, body) is stored in the transaction of what the POST created,
// for 24 h, scoped to the key's owner and the path, with a SHA-256 of the
// request body. A repeat with the same body gets that reply again, with
// Idempotent-Replayed: true, and creates nothing; one with another body
// gets 422 idempotency_key_reused; one while the first is still running
// gets 409 conflict; a key that is not 1 to 255 printable US-ASCII
// characters gets 400.
//
// Store keeps the records through a Backend (bolt.go, postgres.go) and
// knows which keys this process is working on. An API handler calls
// Store.Begin, then its store's create with Call.Save run in the create's
// own transaction, then Call.Write. A request that fails stores nothing,
// so that a retry is processed afresh. The package knows nothing of Caddy
// nor of the APIs.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/reply"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
)

const (
	// Header carries the client's key.
	Header = "Idempotency-Key"
	// ReplayedHeader marks a stored reply sent again.
	ReplayedHeader = "Idempotent-Replayed"
	// MaxKeyLen bounds a key (clients.md).
	MaxKeyLen = 255
	// TTL is how long a reply is kept.
	TTL = 24 * time.Hour
)

// ErrRunning is a Backend's answer when another transaction, of this
// instance or another, holds the record it is to save.
var ErrRunning = errors.New("idempotency: another request with this key is being processed")

// ID names a record: the SHA-256 of the key's owner, the path and the
// key. Neither backend stores the three themselves, so a record is of
// bounded size whatever the key.
type ID [sha256.Size]byte

// ScopeID is the ID of key sent by owner on path. None of the three holds
// a NUL byte (they are printable ASCII), so the joined form is
// unambiguous.
func ScopeID(owner, path, key string) ID {
	h := sha256.New()
	h.Write([]byte(owner))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write([]byte(key))
	var id ID
	h.Sum(id[:0])
	return id
}

// Record is a stored first reply.
type Record struct {
	ID ID
	// RequestHash is the SHA-256 of the first request's body.
	RequestHash [sha256.Size]byte
	Status      int
	Location    string
	// SealedBody is the reply body sealed under the master key and bound
	// to ID: a create's reply holds signing links, which are never stored
	// in clear.
	SealedBody []byte
	// Created is when it was stored; after Expires it is ignored and
	// purged.
	Created, Expires time.Time
}

// Backend stores records; BoltBackend and PostgresBackend implement it.
// Every method works inside tx, a transaction of the storage.DB the
// backend was made for.
type Backend interface {
	// Record reads the record of id that is live at now (Expires after
	// now); nil if there is none. It is the whole of its transaction (a
	// backend may commit with the read).
	Record(ctx context.Context, tx storage.Tx, id ID, now time.Time) (*Record, error)
	// Save stores r in the write transaction tx, unless a record of r.ID
	// is live at now: that one is returned and nothing is stored. It
	// first holds r.ID until tx ends: where several instances share the
	// database, a transaction of another one holding it makes Save answer
	// ErrRunning at once, never wait. An expired record of r.ID is
	// replaced.
	Save(ctx context.Context, tx storage.Tx, r *Record, now time.Time) (live *Record, err error)
	// Expired reports whether a record has expired at now.
	Expired(ctx context.Context, tx storage.Tx, now time.Time) (bool, error)
	// Purge deletes up to limit records expired at now (all if limit ≤
	// 0), oldest first, and returns how many.
	Purge(ctx context.Context, tx storage.Tx, now time.Time, limit int) (int, error)
}

// Config is what a Store needs.
type Config struct {
	DB      storage.DB
	Backend Backend
	// Sealer seals reply bodies under the master key.
	Sealer *seal.Sealer
	// Now is the clock; time.Now if nil.
	Now    func() time.Time
	Logger *zap.Logger
}

// Store keeps the records of one database and the keys this process is
// working on. One Store serves every config of a process (it outlives
// reloads), so that a request on the old config and its repeat on the
// new one see each other.
type Store struct {
	db     storage.DB
	be     Backend
	sealer *seal.Sealer
	now    func() time.Time
	log    *zap.Logger

	mu      sync.Mutex
	running map[ID]struct{}
}

// NewStore checks cfg.
func NewStore(cfg Config) (*Store, error) {
	if cfg.DB == nil || cfg.Backend == nil || cfg.Sealer == nil {
		return nil, errors.New("idempotency: Config.DB, Backend and Sealer are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Store{db: cfg.DB, be: cfg.Backend, sealer: cfg.Sealer, now: cfg.Now, log: cfg.Logger, running: map[ID]struct{}{}}, nil
}

// clock is the store's time at the microsecond, what PostgreSQL keeps,
// so that both backends store the same instants.
func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Microsecond) }

// Reply is what a create answers: status, Location and body (JSON, as
// reply.Encode makes it).
type Reply struct {
	Status   int
	Location string
	Body     []byte
}

// Call is one request with an Idempotency-Key that Begin let through: the
// key is held by this process until Done.
type Call struct {
	s    *Store
	id   ID
	hash [sha256.Size]byte
	once sync.Once
	// created is the reply SaveCreated stored, for Finish.
	created Reply
}

// Begin checks r's Idempotency-Key, sent by owner (the API key's owner)
// to path. Without the header (or on a nil Store) it returns nil and true
// and reads nothing: the caller goes on as usual. Otherwise, it answers
// here and returns false for a bad key (400), a key whose record is live
// (the stored reply again, or 422 for another body), a key this process
// is working on (409) and a storage failure; else it returns the Call
// and true, r's body left to be read again. The caller then creates,
// calling Call.Save in the create's transaction, answers with Call.Write
// (or Call.Recorded on the create's error), and calls Call.Done.
func (s *Store) Begin(w http.ResponseWriter, r *http.Request, owner, path string) (*Call, bool) {
	values := r.Header[Header]
	if s == nil || len(values) == 0 {
		return nil, true
	}
	key, bad := checkKey(values)
	if bad != nil {
		problem.Write(w, bad)
		return nil, false
	}
	body, bad := readBody(w, r)
	if bad != nil {
		problem.Write(w, bad)
		return nil, false
	}
	c := &Call{s: s, id: ScopeID(owner, path, key), hash: sha256.Sum256(body)}
	rec, err := s.lookup(r.Context(), c.id)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	if rec != nil {
		c.answer(w, r, rec)
		return nil, false
	}
	if !s.hold(c.id) {
		problem.Write(w, errRunning())
		return nil, false
	}
	return c, true
}

// checkKey reads the one Idempotency-Key of values, or answers the 400.
// The value is the key as sent, quotes included: the draft's sf-string
// form ("...") is as good a key as any other.
func checkKey(values []string) (string, *problem.Details) {
	msg, code := "", "invalid"
	switch v := values[0]; {
	case len(values) > 1:
		msg = "send one Idempotency-Key header, not " + strconv.Itoa(len(values))
	case v == "":
		msg, code = "the Idempotency-Key header is empty: send 1 to 255 printable US-ASCII characters", "required"
	case len(v) > MaxKeyLen:
		msg, code = "the Idempotency-Key header is "+strconv.Itoa(len(v))+" bytes long: send 1 to 255 printable US-ASCII characters", "too_long"
	case !printable(v):
		msg = "the Idempotency-Key header holds a character that is not printable US-ASCII (0x20 to 0x7E): send 1 to 255 of those"
	default:
		return v, nil
	}
	d := problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, msg)
	d.Errors = []problem.FieldError{{Field: Header, Code: code, Message: msg}}
	return "", d
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// readBody reads r's body (at most problem.MaxBodyBytes, as the decoder
// allows) to hash it, and puts it back for the handler to decode.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *problem.Details) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, problem.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge, "the request body is larger than 1 MiB")
		}
		return nil, problem.New(http.StatusBadRequest, problem.CodeInvalidRequest, "the request body could not be read")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return body, nil
}

func errRunning() *problem.Details {
	d := problem.New(http.StatusConflict, problem.CodeConflict,
		"a request with this Idempotency-Key is still being processed; send it again once that one has been answered")
	d.RetryAfter = 1
	return d
}

func errReused() *problem.Details {
	return problem.New(http.StatusUnprocessableEntity, problem.CodeIdempotencyKeyReused,
		"this Idempotency-Key was used in the last 24 h with another request body; a new request needs a new key")
}

// lookup reads the live record of id.
func (s *Store) lookup(ctx context.Context, id ID) (*Record, error) {
	now := s.clock()
	var rec *Record
	err := s.db.View(ctx, func(tx storage.Tx) error {
		var err error
		rec, err = s.be.Record(ctx, tx, id, now)
		return err
	})
	return rec, err
}

// hold marks id as being worked on by this process, unless it is.
func (s *Store) hold(id ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.running[id]; ok {
		return false
	}
	s.running[id] = struct{}{}
	return true
}

// Save stores rep as the reply of c in tx, the transaction that stores
// what c creates; it may run more than once (a retried transaction). It
// answers the 409 problem when another instance's transaction holds the
// key, and an error that Recorded answers when the key got a record
// since Begin looked (a request of another instance that committed
// meanwhile): the create must then fail, so that it is undone.
func (c *Call) Save(ctx context.Context, tx storage.Tx, rep Reply) error {
	now := c.s.clock()
	rec := &Record{
		ID: c.id, RequestHash: c.hash, Status: rep.Status, Location: rep.Location,
		SealedBody: c.s.sealer.Seal(rep.Body, c.id[:]), Created: now, Expires: now.Add(TTL),
	}
	live, err := c.s.be.Save(ctx, tx, rec, now)
	switch {
	case errors.Is(err, ErrRunning):
		return errRunning()
	case err != nil:
		return err
	case live != nil:
		return &recordedError{live}
	}
	return nil
}

// recordedError is Save's finding that the key has a live record.
type recordedError struct{ rec *Record }

func (e *recordedError) Error() string { return "idempotency: the key has a record already" }

// SaveCreated is Save of the 201 reply of a create: the new record at
// location, v as its body. Finish answers with it.
func (c *Call) SaveCreated(ctx context.Context, tx storage.Tx, location string, v any) error {
	body, err := reply.Encode(v)
	if err != nil {
		return err
	}
	c.created = Reply{Status: http.StatusCreated, Location: location, Body: body}
	return c.Save(ctx, tx, c.created)
}

// Finish answers the create that ended with err and called SaveCreated:
// its stored reply, or the key's record that Save found (Recorded), or
// fail's answer to any other error.
func (c *Call) Finish(w http.ResponseWriter, r *http.Request, err error, fail func(http.ResponseWriter, *http.Request, error)) {
	switch {
	case err == nil:
		c.Write(w, c.created)
	case !c.Recorded(w, r, err):
		fail(w, r, err)
	}
}

// Write sends rep, the reply that Save stored, to the client of c.
func (c *Call) Write(w http.ResponseWriter, rep Reply) {
	if rep.Location != "" {
		w.Header().Set("Location", rep.Location)
	}
	reply.Bytes(w, rep.Status, rep.Body)
}

// Recorded answers a create that failed with Save's finding that the key
// has a record (the stored reply, or 422) and reports true; for any
// other error it answers nothing and reports false.
func (c *Call) Recorded(w http.ResponseWriter, r *http.Request, err error) bool {
	var re *recordedError
	if !errors.As(err, &re) {
		return false
	}
	c.answer(w, r, re.rec)
	return true
}

// Done frees the key for the next request of this process.
func (c *Call) Done() {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.running, c.id)
		c.s.mu.Unlock()
	})
}

// answer sends rec again, or the 422 when c's body is another.
func (c *Call) answer(w http.ResponseWriter, r *http.Request, rec *Record) {
	if rec.RequestHash != c.hash {
		problem.Write(w, errReused())
		return
	}
	body, err := c.s.sealer.Open(rec.SealedBody, rec.ID[:])
	if err != nil {
		c.s.fail(w, r, errors.New("idempotency: a stored reply does not open under the master key: "+err.Error()))
		return
	}
	w.Header().Set(ReplayedHeader, "true")
	c.Write(w, Reply{Status: rec.Status, Location: rec.Location, Body: body})
}

// fail answers err as its problem, logging what a 5xx hides.
func (s *Store) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() == nil {
		s.log.Error("idempotency: request failed", zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.Error(err))
	}
	problem.WriteError(w, err)
}

// Purge deletes up to limit records whose 24 h have passed (all if limit
// ≤ 0) and returns how many. Lookups ignore them already; the purge
// frees their room. With nothing due it costs one read transaction.
func (s *Store) Purge(ctx context.Context, limit int) (int, error) {
	now := s.clock()
	due := false
	if err := s.db.View(ctx, func(tx storage.Tx) error {
		var err error
		due, err = s.be.Expired(ctx, tx, now)
		return err
	}); err != nil || !due {
		return 0, err
	}
	n := 0
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		var err error
		n, err = s.be.Purge(ctx, tx, now, limit)
		return err
	})
	return n, err
}
