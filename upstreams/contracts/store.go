package contracts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/text"
	"github.com/keygate/keygate/internal/token"
)

// DefaultContractValidity is how long a contract stays open when the
// request sets no expirationTimestamp (spec, contract_validity).
const DefaultContractValidity = 7 * 24 * time.Hour

// maxOwnerLen bounds createdById, which search rows store with a 16-bit
// length.
const maxOwnerLen = 1024

// Config is what the store needs from the gateway.
type Config struct {
	DB storage.DB
	// Backend keeps the contracts in DB: NewBoltBackend or
	// NewPostgresBackend of the same database.
	Backend   Backend
	Templates *Templates
	// Pages, when set, is the issue tracker's: a templateId that the
	// registry does not have is read from it (a host.Host reads "42" and
	// "wiki:acme:NDA" on Redmine), and the page's text is copied into the
	// contract with the version read.
	Pages PageReader
	// Sealer seals signing-link tokens so the creator can see them again.
	Sealer *seal.Sealer
	// PublicBaseURL prefixes signing links: {PublicBaseURL}/sign/{token}.
	PublicBaseURL string
	// ContractValidity is the default lifetime; DefaultContractValidity if 0.
	ContractValidity time.Duration
	// SMSConfigured tells whether an sms shipper exists; phones are refused
	// without one.
	SMSConfigured bool
	// Now is the clock; time.Now if nil.
	Now    func() time.Time
	Logger *zap.Logger
	// OnCreate, if set, runs in the transaction that stores a new contract,
	// so invitations and notifications can be queued atomically with it.
	// It may run more than once for one contract if the transaction is
	// retried; only the last run's writes persist. by is the origin of
	// the creating request (WithOrigin), for the certificate's record.
	OnCreate func(tx storage.Tx, c *Contract, by Origin) error
	// OnDelete, if set, runs in the transaction that deletes a contract,
	// so its attachments and pending notifications go with it.
	OnDelete func(tx storage.Tx, c *Contract) error
	// Events receives the webhook events of contracts (events.Contract*)
	// in the transaction of each change: created, archived, expired and
	// deleted from this store, and opened, signed, rejected and completed
	// from the changes the signing lifecycle makes through Update, which
	// takes them from here. nil means events.Discard.
	Events events.Sink
	// Idempotency keeps the replies of creates sent with an
	// Idempotency-Key (clients.md); nil: the header is ignored.
	Idempotency *idempotency.Store
}

// Store keeps contracts with their search indexes through its Backend.
type Store struct {
	cfg     Config
	db      storage.DB
	backend Backend
	events  events.Sink
	log     *zap.Logger
	// newID makes contract ids: uuid.NewV7, time-ordered, so new records
	// append to the B+tree. Tests that compare two stores set it.
	newID func() (uuid.UUID, error)
	// pageReads holds a place for each read of a tracker page in
	// flight (readPage): a flood of creates cannot take the tracker from
	// the share pages.
	pageReads chan struct{}
}

// NewStore checks cfg and fills its defaults.
func NewStore(cfg Config) (*Store, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("contracts: Config.DB is required")
	case cfg.Backend == nil:
		return nil, errors.New("contracts: Config.Backend is required")
	case cfg.Templates == nil:
		return nil, errors.New("contracts: Config.Templates is required")
	case cfg.Sealer == nil:
		return nil, errors.New("contracts: Config.Sealer is required")
	case cfg.ContractValidity < 0:
		return nil, errors.New("contracts: Config.ContractValidity must not be negative")
	}
	if cfg.ContractValidity == 0 {
		cfg.ContractValidity = DefaultContractValidity
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Events == nil {
		cfg.Events = events.Discard
	}
	return &Store{cfg: cfg, db: cfg.DB, backend: cfg.Backend, events: cfg.Events, log: cfg.Logger, newID: uuid.NewV7,
		pageReads: make(chan struct{}, MaxPageReads)}, nil
}

// now is the clock at the millisecond precision that timestamps are shown
// with, so what is stored is exactly what clients see and filter on.
func (s *Store) now() time.Time {
	return s.cfg.Now().UTC().Truncate(time.Millisecond)
}

var (
	errNotFound  = problem.NotFound("no contract with this id")
	errNoSigning = problem.NotFound("no signing link with this token")
)

// parseID reads a contract or signer id; anything else is unknown (404),
// never a 400, so ids cannot be probed for format.
func parseID(id string) (uuid.UUID, bool) {
	if len(id) != 36 {
		return uuid.UUID{}, false
	}
	u, err := uuid.Parse(id)
	return u, err == nil
}

// Create validates in, copies the template and stores the contract with
// its indexes and signing links in one transaction, shared with concurrent
// creates (db.Batch) so that many creates cost few disk syncs. The
// template is read in that transaction; one the registry lacks is read
// from the tracker (Config.Pages) outside it, and the transaction runs
// again with the page. The returned contract's signers carry their clear
// tokens, for AccessURL.
func (s *Store) Create(ctx context.Context, owner string, in *CreateRequest) (*Contract, error) {
	return s.CreateWith(ctx, owner, in, nil)
}

// CreateWith is Create with inTx, when not nil, run last in the
// transaction that stores the contract (after OnCreate), for what must
// commit with it or not at all: an idempotent create's stored reply. It
// may run more than once; an error fails this create alone.
func (s *Store) CreateWith(ctx context.Context, owner string, in *CreateRequest, inTx func(tx storage.Tx, c *Contract) error) (*Contract, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !text.PrintableASCII(owner, maxOwnerLen) {
		// Owners come from the key store, not the request: a bad one is
		// the server's fault.
		return nil, errors.New("contracts: creator id must be printable US-ASCII")
	}
	now := s.now()
	var f problem.Fields
	d, err := s.validateCreate(ctx, &f, in, now, false)
	if err != nil {
		return nil, err
	}
	if f.Err() != nil {
		// Refused anyway: validate again with the template looked up, so
		// the problem lists an unknown template in its place too.
		f = problem.Fields{}
		if _, err := s.validateCreate(ctx, &f, in, now, true); err != nil {
			return nil, err
		}
		return nil, f.Err()
	}

	id, err := s.newID()
	if err != nil {
		return nil, err
	}
	c := &Contract{
		ID:                  id.String(),
		TemplateID:          in.TemplateID,
		Name:                in.Name,
		CreatedByID:         owner,
		CreationTimestamp:   now,
		ExpirationTimestamp: d.expires,
		SequentialSigning:   in.SequentialSigning != nil && *in.SequentialSigning,
		Status:              StatusSent,
		Signers:             d.signers,
		Watchers:            d.watchers,
	}

	// Everything that costs CPU happens here, outside the transaction:
	// ids, tokens, sealing, the search text.
	for i := range c.Signers {
		sg := &c.Signers[i]
		sg.ID = uuid.New().String()
		sg.token = token.Random()
		sg.TokenHash = token.HashOf(sg.token)
		sg.SealedToken = s.cfg.Sealer.Seal([]byte(sg.token), tokenAAD(c.ID, sg.ID))
	}
	st := searchText(c)
	by := OriginFrom(ctx)
	// page is read from the tracker, outside any transaction, once the
	// registry turned out not to have the template.
	var page *trackerPage
	store := func(tx storage.Tx) error {
		collection, digest, err := s.backend.HoldTemplate(ctx, tx, in.TemplateID)
		c.TemplateID, c.TemplateSource = in.TemplateID, ""
		switch {
		case problem.IsNotFound(err) && page != nil:
			// Not in the registry now either: the tracker's page, under
			// the tracker's name for it, so that every spelling of one
			// page finds its contracts by template-id.
			c.TemplateID, collection, digest, c.TemplateSource = page.ref, page.collection, page.digest, page.source
			err = s.backend.HoldDocument(ctx, tx, digest, &page.doc)
		case problem.IsNotFound(err) && s.cfg.Pages != nil:
			return errOnTracker
		case problem.IsNotFound(err):
			var f problem.Fields
			f.Add("templateId", codeUnknownTemplate, "templateId names no registered template")
			return f.Err()
		}
		if err != nil {
			return err
		}
		c.CollectionID = collection
		c.DocumentDigest = digest[:]
		record, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if err := s.backend.Insert(ctx, tx, c, record, st); err != nil {
			return err
		}
		if s.cfg.OnCreate != nil {
			if err := s.cfg.OnCreate(tx, c, by); err != nil {
				return err
			}
		}
		if inTx != nil {
			if err := inTx(tx, c); err != nil {
				return err
			}
		}
		return s.emit(tx, events.ContractCreated, c, now, "")
	}
	err = s.db.Batch(ctx, store)
	if errors.Is(err, errOnTracker) {
		if page, err = s.readPage(ctx, in.TemplateID); err != nil {
			return nil, err
		}
		err = s.db.Batch(ctx, store)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// tokenAAD binds a sealed token to the contract and signer that hold it.
func tokenAAD(contractID, signerID string) []byte {
	return []byte(contractID + signerID)
}

// Get returns contract id with its effective status, or a 404 problem.
func (s *Store) Get(ctx context.Context, id string) (*Contract, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, ok := parseID(id)
	if !ok {
		return nil, errNotFound
	}
	c, err := s.backend.Contract(ctx, u)
	if err != nil {
		return nil, err
	}
	c.Status = c.EffectiveStatus(s.now())
	return c, nil
}

// Update loads contract id, lets fn change it inside the write
// transaction, settles its status (decisions, then expiry) and stores it
// with its indexes. fn may write other stores in tx (an outbox, say).
// The returned contract shows its effective status.
func (s *Store) Update(ctx context.Context, id string, fn func(tx storage.Tx, c *Contract) error) (*Contract, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, ok := parseID(id)
	if !ok {
		return nil, errNotFound
	}
	now := s.now()
	var out *Contract
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		c, err := s.backend.Load(ctx, tx, u, true)
		if err != nil {
			return err
		}
		if err := s.rewrite(ctx, tx, c, now, fn); err != nil {
			return err
		}
		out = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.Status = out.EffectiveStatus(now)
	return out, nil
}

// rewrite applies fn to c and stores the result, moving its index entries,
// and emits the events of the change (emitChanges). Template, creator,
// creation time, name and signers' names and e-mails are fixed at
// creation, so the search text stays as it is.
func (s *Store) rewrite(ctx context.Context, tx storage.Tx, c *Contract, now time.Time, fn func(tx storage.Tx, c *Contract) error) error {
	before := c.clone()
	if fn != nil {
		if err := fn(tx, c); err != nil {
			return err
		}
	}
	c.settle(now)
	record, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if err := s.backend.Replace(ctx, tx, before, c, record); err != nil {
		return err
	}
	return s.emitChanges(tx, before, c)
}

// Archive moves contract id to the archive. Archiving an archived
// contract succeeds and keeps the first archivalTimestamp.
func (s *Store) Archive(ctx context.Context, id string) error {
	now := s.now()
	_, err := s.Update(ctx, id, func(_ storage.Tx, c *Contract) error {
		if c.ArchivalTimestamp.IsZero() {
			c.ArchivalTimestamp = now
		}
		return nil
	})
	return err
}

// Delete removes contract id, its row, index entries, signing links,
// attachments and (if no other contract holds it) its document copy in one
// transaction, with whatever Config.OnDelete removes; the event
// contract.deleted carries the contract as it was.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	u, ok := parseID(id)
	if !ok {
		return errNotFound
	}
	now := s.now()
	return s.db.Update(ctx, func(tx storage.Tx) error {
		c, err := s.backend.Load(ctx, tx, u, true)
		if err != nil {
			return err
		}
		// The contract as it was, emitted last, so that nothing OnDelete
		// drops by the contract's id takes the event with it.
		gone := c.clone()
		gone.Status = c.EffectiveStatus(now)
		if s.cfg.OnDelete != nil {
			if err := s.cfg.OnDelete(tx, c); err != nil {
				return err
			}
		}
		if err := s.backend.Remove(ctx, tx, c); err != nil {
			return err
		}
		if err := s.backend.ReleaseDocument(ctx, tx, c.DocumentDigest); err != nil {
			return err
		}
		return s.emit(tx, events.ContractDeleted, gone, now, "")
	})
}

// Document returns the text copied from the template when c was created.
func (s *Store) Document(ctx context.Context, c *Contract) (*Document, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var d Document
	err := s.db.View(ctx, func(tx storage.Tx) error {
		v, err := s.backend.Document(ctx, tx, c.DocumentDigest)
		if err != nil {
			return err
		}
		if v == nil {
			return errors.New("contracts: document of " + c.ID + " is missing")
		}
		return json.Unmarshal(v, &d)
	})
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// AccessURL returns the signing link of signer i of c:
// {PublicBaseURL}/sign/{token}. Only the contract's creator may be shown it.
func (s *Store) AccessURL(c *Contract, i int) (string, error) {
	sg := &c.Signers[i]
	token := sg.token
	if token == "" {
		plain, err := s.cfg.Sealer.Open(sg.SealedToken, tokenAAD(c.ID, sg.ID))
		if err != nil {
			return "", err
		}
		token = string(plain)
	}
	return s.cfg.PublicBaseURL + "/sign/" + token, nil
}

// SigningPage is BySigningToken with the contract's document (Document):
// what a signing page shows, read at once (Backend.SigningPage).
func (s *Store) SigningPage(ctx context.Context, tok string) (c *Contract, signer int, doc *Document, err error) {
	if err := ctx.Err(); err != nil {
		return nil, -1, nil, err
	}
	c, sid, raw, err := s.backend.SigningPage(ctx, token.HashOf(tok))
	if err != nil {
		return nil, -1, nil, err
	}
	if signer = c.SignerByID(sid.String()); signer < 0 {
		return nil, -1, nil, errNoSigning
	}
	if raw == nil {
		return nil, -1, nil, errors.New("contracts: document of " + c.ID + " is missing")
	}
	doc = new(Document)
	if err := json.Unmarshal(raw, doc); err != nil {
		return nil, -1, nil, err
	}
	c.Status = c.EffectiveStatus(s.now())
	return c, signer, doc, nil
}

// BySigningToken finds the contract and the index of the signer that a
// signing-link token belongs to, or answers a 404 problem. The contract
// shows its effective status.
func (s *Store) BySigningToken(ctx context.Context, tok string) (*Contract, int, error) {
	return s.ByTokenHash(ctx, token.HashOf(tok))
}

// ByTokenHash is BySigningToken for a token already hashed.
func (s *Store) ByTokenHash(ctx context.Context, h token.Hash) (*Contract, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, -1, err
	}
	var c *Contract
	var signer int
	err := s.db.View(ctx, func(tx storage.Tx) error {
		cid, sid, err := s.backend.SigningToken(ctx, tx, h)
		if err != nil {
			return err
		}
		if c, err = s.backend.Load(ctx, tx, cid, false); err != nil {
			return err
		}
		signer = c.SignerByID(sid.String())
		if signer < 0 {
			return errNoSigning
		}
		return nil
	})
	if err != nil {
		return nil, -1, err
	}
	c.Status = c.EffectiveStatus(s.now())
	return c, signer, nil
}

// SweepExpired writes down the expiry of contracts whose time has come
// while sent or ongoing, at most limit of them (all if limit ≤ 0), and
// returns how many it wrote. Reads already show them expired; the sweeper
// makes the stored status agree.
func (s *Store) SweepExpired(ctx context.Context, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	now := s.now()
	// Most sweeps find nothing due; a read transaction tells so without
	// the disk sync of a write.
	due := false
	if err := s.db.View(ctx, func(tx storage.Tx) error {
		ids, err := s.backend.Expiring(ctx, tx, now, 1)
		due = len(ids) > 0
		return err
	}); err != nil || !due {
		return 0, err
	}
	n := 0
	err := s.db.Update(ctx, func(tx storage.Tx) error {
		due, err := s.backend.Expiring(ctx, tx, now, limit)
		if err != nil {
			return err
		}
		n = 0
		for _, id := range due {
			c, err := s.backend.Load(ctx, tx, id, true)
			if problem.IsNotFound(err) {
				continue // deleted since it was listed
			}
			if err != nil {
				return err
			}
			if !c.Status.live() {
				continue // decided since it was listed
			}
			if err := s.rewrite(ctx, tx, c, now, nil); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// bucketAttachments: contract id (16 bytes) and attachment id (16 bytes) →
// the attachment's bytes: the PDFs made when a contract is completed.
var bucketAttachments = []byte("contract_attachments")

// PDFMediaType is the media type of every attachment.
const PDFMediaType = "application/pdf"

var errNoAttachment = problem.NotFound("no such attachment")

// PutAttachment stores data as a PDF attachment of c in tx, the write
// transaction of an Update (whose fn then sets c.FinalizedPDF or
// c.CertificatePDF to the result), so that the file and the contract that
// lists it commit together. Delete removes it with the contract.
func (s *Store) PutAttachment(tx storage.Tx, c *Contract, fileName string, data []byte) (*Attachment, error) {
	cid, ok := parseID(c.ID)
	if !ok {
		return nil, errors.New("contracts: attachment for a contract without a valid id")
	}
	aid := uuid.New()
	if err := s.backend.PutAttachment(context.Background(), tx, cid, aid, data); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	return &Attachment{
		ID:        aid.String(),
		FileName:  fileName,
		MediaType: PDFMediaType,
		Size:      int64(len(data)),
		SHA256:    hex.EncodeToString(sum[:]),
	}, nil
}

// Attachment returns attachment attachmentID of contract id and its bytes,
// or a 404 problem when either is unknown.
func (s *Store) Attachment(ctx context.Context, id, attachmentID string) (*Attachment, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	cid, ok := parseID(id)
	if !ok {
		return nil, nil, errNotFound
	}
	aid, ok := parseID(attachmentID)
	if !ok {
		return nil, nil, errNoAttachment
	}
	var a *Attachment
	var data []byte
	err := s.db.View(ctx, func(tx storage.Tx) error {
		c, err := s.backend.Load(ctx, tx, cid, false)
		if err != nil {
			return err
		}
		for _, x := range []*Attachment{c.FinalizedPDF, c.CertificatePDF} {
			if x != nil && x.ID == aid.String() {
				a = x
			}
		}
		if a == nil {
			return errNoAttachment
		}
		if data, err = s.backend.Attachment(ctx, tx, cid, aid); err != nil {
			return err
		}
		if data == nil {
			return errors.New("contracts: attachment " + a.ID + " of " + c.ID + " is missing")
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return a, data, nil
}

// SearchResult is one page of a search and the number of all matches.
type SearchResult struct {
	TotalCount int
	// Contracts hold their effective status; the handler leaves out their
	// signers and watchers.
	Contracts []*Contract
}

// Search runs q in one read transaction (a page and its total count come
// from one snapshot).
func (s *Store) Search(ctx context.Context, q Query) (*SearchResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := s.now()
	res := &SearchResult{}
	err := s.db.View(ctx, func(tx storage.Tx) error {
		var err error
		res.TotalCount, res.Contracts, err = s.backend.Search(ctx, tx, &q, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, c := range res.Contracts {
		c.Status = c.EffectiveStatus(now)
	}
	return res, nil
}
