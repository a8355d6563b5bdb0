// Package signing is the contract signing lifecycle (docs/clients.md,
// sections Status, Signing and Notifications): the public signing pages
// under /sign/, one-time passwords, signer decisions and the status moves
// they cause, the notifications each change sends through the durable
// outbox, and the signed PDFs made when the last signer signs.
//
// Every change and the notifications it causes are written in one
// transaction of the storage backend: decisions through
// contracts.Store.Update, invitations and the watchers' "created" through
// contracts.Config.OnCreate, one-time passwords and signatures through
// this package's Backend. The webhook events of these changes (opened,
// signed, rejected, completed) are emitted by the contract store from
// what each Update changed, into contracts.Config.Events: the one place a
// gateway sets the Sink of contract events. The package knows nothing of
// Caddy; caddymodule serves Handler as webapi_signing.
package signing

import (
	"context"
	"errors"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/upstreams/contracts"
)

// Prefix is the path the signing pages own: {public_base_url}/sign/{token}.
const Prefix = "/sign"

// Watcher notification kinds (docs/clients.md, Notifications).
const (
	KindCreated           = "created"
	KindOpened            = "opened"
	KindSigned            = "signed"
	KindRejected          = "rejected"
	KindCompleted         = "completed"
	KindCompletedContract = "completed-contract"
)

// The buckets of this package. The first two are keyed by the 16 bytes of
// a signer id, which is unique across contracts.
var (
	// bucketOTPs: signer id → JSON otpRecord, the signer's current
	// one-time password, hashed.
	bucketOTPs = []byte("signing_otps")
	// bucketSignatures: signer id → method byte and the signature (image
	// bytes or typed name), kept from the signer's decision until the
	// contract is final and its PDFs hold them.
	bucketSignatures = []byte("signing_signatures")
	// bucketTrail: the 16 bytes of a contract id and a big-endian uint64
	// from the bucket's sequence → JSON TrailEvent: each contract's
	// events in the order they were recorded, kept while it exists.
	bucketTrail = []byte("signing_trail")
	// bucketSealQueue: the 16 bytes of a contract id → its completion's
	// time, big-endian Unix nanoseconds: the completions whose documents
	// wait to be made and sealed.
	bucketSealQueue = []byte("signing_seal_queue")
)

// Config is what the lifecycle needs besides the contract store's config.
type Config struct {
	// Outbox receives every e-mail and text message, in the transaction of
	// the change that causes it.
	Outbox *notify.Outbox
	// Backend keeps one-time passwords and signatures; when nil, the
	// backend of contracts.Config.DB's kind.
	Backend Backend
	// OTPKey keys the HMAC under which one-time passwords are stored, so a
	// copy of the database alone does not let anyone test the million
	// possible codes. At least 32 bytes; derive it from the master key.
	OTPKey []byte
	// Seal seals a document of a completed contract (the finalized PDF,
	// then the certificate of completion) with a PDF digital signature
	// over the whole file; nil leaves them unsealed. It runs outside any
	// transaction, after the completion's: it may wait on a timestamp
	// authority. A seal that fails leaves the completion queued, to be
	// tried again: a contract never carries a document that claims a
	// seal it lacks.
	Seal func(doc []byte, c *contracts.Contract) ([]byte, error)
	// Sealed, if set, runs in the transaction that stores a completion's
	// sealed documents, for each, to index it (for /verify) with the
	// contract.
	Sealed func(tx storage.Tx, doc []byte, c *contracts.Contract) error
	// SealWait bounds how long a signer's download waits for documents
	// being sealed (DefaultSealWait when zero): the timestamp
	// authority's timeout, say.
	SealWait time.Duration
}

// Service runs the signing lifecycle over a contract store.
type Service struct {
	store   *contracts.Store
	db      storage.DB
	outbox  *notify.Outbox
	backend Backend
	otpKey  []byte
	clock   func() time.Time
	log     *zap.Logger
	seal    func(doc []byte, c *contracts.Contract) ([]byte, error)
	sealed  func(tx storage.Tx, doc []byte, c *contracts.Contract) error
	// sealing is this instance's work on completions' documents.
	sealing  sealings
	sealWait time.Duration
	// sealRetryAfter is DefaultSealRetryAfter; tests shorten it.
	sealRetryAfter time.Duration
}

// New makes the contract store of cc with the lifecycle hooked into it:
// it sets cc.OnCreate (invitations, watchers' "created") and cc.OnDelete
// (one-time passwords, stored signatures and pending notifications go with
// the contract). The store and the service share cc's clock and logger.
func New(cc contracts.Config, cfg Config) (*Service, error) {
	switch {
	case cc.DB == nil:
		return nil, errors.New("signing: contracts.Config.DB is required")
	case cfg.Outbox == nil:
		return nil, errors.New("signing: Config.Outbox is required")
	case len(cfg.OTPKey) < 32:
		return nil, errors.New("signing: Config.OTPKey must be at least 32 bytes")
	case cc.OnCreate != nil || cc.OnDelete != nil:
		return nil, errors.New("signing: contracts.Config hooks are set by signing.New")
	}
	if cc.Now == nil {
		cc.Now = time.Now
	}
	if cc.Logger == nil {
		cc.Logger = zap.NewNop()
	}
	s := &Service{db: cc.DB, backend: cfg.Backend, outbox: cfg.Outbox, otpKey: cfg.OTPKey, clock: cc.Now, log: cc.Logger, seal: cfg.Seal, sealed: cfg.Sealed, sealWait: cfg.SealWait,
		sealRetryAfter: DefaultSealRetryAfter}
	if s.sealWait <= 0 {
		s.sealWait = DefaultSealWait
	}
	s.sealing.ctx, s.sealing.stop = context.WithCancel(context.Background())
	s.sealing.slots = make(chan struct{}, maxSealing)
	s.sealing.running, s.sealing.retry = map[string]chan struct{}{}, map[string]sealRetry{}
	cc.OnCreate = s.onCreate
	cc.OnDelete = s.onDelete
	if s.backend == nil {
		var err error
		if s.backend, err = defaultBackend(cc.DB); err != nil {
			return nil, err
		}
	}
	var err error
	if s.store, err = contracts.NewStore(cc); err != nil {
		return nil, err
	}
	return s, nil
}

// Contracts is the contract store the lifecycle is hooked into, for the
// Contract Signing API.
func (s *Service) Contracts() *contracts.Store { return s.store }

// now is the clock at the millisecond precision of every timestamp shown.
func (s *Service) now() time.Time {
	return s.clock().UTC().Truncate(time.Millisecond)
}

// onCreate runs in the transaction that stores c, made by the request of
// origin by: the trail's creation, the links handed to the API client for
// url signers, the invitations of the signers whose turn has begun and
// the watchers' "created".
func (s *Service) onCreate(tx storage.Tx, c *contracts.Contract, by contracts.Origin) error {
	now := c.CreationTimestamp
	created := TrailEvent{At: now, Kind: TrailCreated, Owner: c.CreatedByID, KeyID: by.KeyID, KeyName: by.KeyName}
	if err := s.record(tx, c, nil, by, created); err != nil {
		return err
	}
	for i := range c.Signers {
		// The API's reply carries every url signer's link, whatever the
		// order of signing.
		if sg := &c.Signers[i]; sg.AccessKind == contracts.AccessURL {
			if err := s.record(tx, c, sg, by, TrailEvent{At: now, Kind: TrailLinkIssued}); err != nil {
				return err
			}
		}
	}
	for i := range c.Signers {
		if c.SequentialSigning && i > 0 {
			break
		}
		if err := s.invite(tx, c, i, now, by); err != nil {
			return err
		}
	}
	return s.notifyWatchers(tx, c, KindCreated, nil, nil)
}

// onDelete runs in the transaction that deletes c.
func (s *Service) onDelete(tx storage.Tx, c *contracts.Contract) error {
	if err := s.forgetSigners(tx, c); err != nil {
		return err
	}
	if err := s.backend.DeleteTrail(tx, c.ID); err != nil {
		return err
	}
	if err := s.backend.Sealed(tx, c.ID); err != nil {
		return err
	}
	return s.outbox.DropRef(tx, c.ID)
}

// forgetSigners deletes the one-time passwords and stored signatures of
// c's signers: once c is final or gone, nobody needs them.
func (s *Service) forgetSigners(tx storage.Tx, c *contracts.Contract) error {
	ids := make([]string, len(c.Signers))
	for i := range c.Signers {
		ids[i] = c.Signers[i].ID
	}
	return s.backend.Forget(tx, ids)
}

// defaultBackend is the signing Backend of db's kind.
func defaultBackend(db storage.DB) (Backend, error) {
	switch d := db.(type) {
	case *boltdb.DB:
		return NewBoltBackend(d)
	case *pgdb.DB:
		return NewPostgresBackend(d), nil
	}
	return nil, errors.New("signing: no Backend for storage " + db.Backend())
}
