package contracts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
	"github.com/keygate/keygate/keystore"
)

// DefaultContractValidity is how long a contract stays open when the
// request sets no expirationTimestamp (spec, contract_validity).
const DefaultContractValidity = 7 * 24 * time.Hour

// maxOwnerLen bounds createdById, which search rows store with a 16-bit
// length.
const maxOwnerLen = 1024

// Config is what the store needs from the gateway.
type Config struct {
	DB        *bbolt.DB
	Templates *Templates
	// Sealer seals signing-link tokens so the creator can see them again.
	Sealer *keystore.Sealer
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
	// It may run more than once for one contract if the batched
	// transaction is retried; only the last run's writes persist.
	OnCreate func(tx *bbolt.Tx, c *Contract) error
	// OnDelete, if set, runs in the transaction that deletes a contract,
	// so its attachments and pending notifications go with it.
	OnDelete func(tx *bbolt.Tx, c *Contract) error
}

// Store keeps contracts in bbolt with their search indexes. It is the only
// code that touches the contract buckets.
type Store struct {
	cfg Config
	db  *bbolt.DB
	log *zap.Logger
}

// NewStore checks cfg, fills its defaults and creates the buckets.
func NewStore(cfg Config) (*Store, error) {
	switch {
	case cfg.DB == nil:
		return nil, errors.New("contracts: Config.DB is required")
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
	err := cfg.DB.Update(func(tx *bbolt.Tx) error {
		for _, name := range append(storeBuckets, bucketAttachments) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Store{cfg: cfg, db: cfg.DB, log: cfg.Logger}, nil
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
// returned contract's signers carry their clear tokens, for AccessURL.
func (s *Store) Create(ctx context.Context, owner string, in *CreateRequest) (*Contract, error) {
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
	d, err := s.validateCreate(&f, in, now)
	if err != nil {
		return nil, err
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	tpl, digest := &d.template, d.digest

	id, err := uuid.NewV7() // time-ordered: new records append to the B+tree
	if err != nil {
		return nil, err
	}
	c := &Contract{
		ID:                  id.String(),
		TemplateID:          in.TemplateID,
		CollectionID:        tpl.CollectionID,
		Name:                in.Name,
		CreatedByID:         owner,
		CreationTimestamp:   now,
		ExpirationTimestamp: d.expires,
		SequentialSigning:   in.SequentialSigning != nil && *in.SequentialSigning,
		Status:              StatusSent,
		DocumentDigest:      digest[:],
		Signers:             d.signers,
		Watchers:            d.watchers,
	}

	// Everything that costs CPU happens here, outside the write lock: ids,
	// tokens, sealing, encoding. The transaction only puts bytes.
	tokenKeys := make([][]byte, len(c.Signers))
	for i := range c.Signers {
		sg := &c.Signers[i]
		sid := uuid.New()
		sg.ID = sid.String()
		sg.token = keystore.RandomString()
		sg.TokenHash = keystore.HashToken(sg.token)
		sg.SealedToken = s.cfg.Sealer.Seal([]byte(sg.token), tokenAAD(c.ID, sg.ID))
		v := make([]byte, 0, 32)
		v = append(v, id[:]...)
		tokenKeys[i] = append(v, sid[:]...)
	}
	record, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	rk := makeRowKey(now, id)
	rowValue := encodeRow(c, searchText(c))
	entries := indexEntries(c, rk)
	var document []byte
	if !d.storedDocument {
		if document, err = json.Marshal(documentRecord{Title: tpl.Title, Body: tpl.Body}); err != nil {
			return nil, err
		}
	}

	err = s.db.Batch(func(tx *bbolt.Tx) error {
		if err := holdDocument(tx, digest[:], document, tpl); err != nil {
			return err
		}
		if err := tx.Bucket(bucketContracts).Put(id[:], record); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRows).Put(rk[:], rowValue); err != nil {
			return err
		}
		if err := writeIndexes(tx, nil, entries); err != nil {
			return err
		}
		if err := addCount(tx, []byte(countAll), 1); err != nil {
			return err
		}
		tokens := tx.Bucket(bucketSigningTokens)
		for i := range c.Signers {
			if err := tokens.Put(c.Signers[i].TokenHash[:], tokenKeys[i]); err != nil {
				return err
			}
		}
		if s.cfg.OnCreate != nil {
			return s.cfg.OnCreate(tx, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// documentRecord is the stored copy of a template's text.
type documentRecord struct {
	Title string `json:"title"`
	Body  string `json:"body"`
}

// holdDocument counts one more contract holding document digest, storing
// the document first if no contract holds it yet. encoded is the document
// as encoded before the transaction, nil if it was stored then.
func holdDocument(tx *bbolt.Tx, digest, encoded []byte, tpl *Template) error {
	docs := tx.Bucket(bucketDocuments)
	if docs.Get(digest) == nil {
		if encoded == nil {
			// The last contract holding it was deleted since we looked.
			var err error
			if encoded, err = json.Marshal(documentRecord{Title: tpl.Title, Body: tpl.Body}); err != nil {
				return err
			}
		}
		if err := docs.Put(digest, encoded); err != nil {
			return err
		}
	}
	return bump(tx.Bucket(bucketDocumentRefs), digest, 1)
}

// releaseDocument counts one contract fewer holding document digest and
// deletes the document when none is left.
func releaseDocument(tx *bbolt.Tx, digest []byte) error {
	refs := tx.Bucket(bucketDocumentRefs)
	if err := bump(refs, digest, -1); err != nil {
		return err
	}
	if refs.Get(digest) == nil {
		return tx.Bucket(bucketDocuments).Delete(digest)
	}
	return nil
}

// tokenAAD binds a sealed token to the contract and signer that hold it.
func tokenAAD(contractID, signerID string) []byte {
	return []byte(contractID + signerID)
}

// load reads and decodes contract id inside tx; the decoded value owns its
// memory, so it outlives the transaction.
func load(tx *bbolt.Tx, id uuid.UUID) (*Contract, error) {
	v := tx.Bucket(bucketContracts).Get(id[:])
	if v == nil {
		return nil, errNotFound
	}
	return decoded.decode(id, v)
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
	var c *Contract
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		c, err = load(tx, u)
		return err
	})
	if err != nil {
		return nil, err
	}
	c.Status = c.EffectiveStatus(s.now())
	return c, nil
}

// Update loads contract id, lets fn change it inside the write
// transaction, settles its status (decisions, then expiry) and stores it
// with its indexes. fn may write other buckets in tx (an outbox, say).
// Later lifecycle code (opening, deciding, attachments) builds on it. The
// returned contract shows its effective status.
func (s *Store) Update(ctx context.Context, id string, fn func(tx *bbolt.Tx, c *Contract) error) (*Contract, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	u, ok := parseID(id)
	if !ok {
		return nil, errNotFound
	}
	now := s.now()
	var out *Contract
	err := s.db.Update(func(tx *bbolt.Tx) error {
		c, err := load(tx, u)
		if err != nil {
			return err
		}
		if err := s.rewrite(tx, c, now, fn); err != nil {
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

// rewrite applies fn to c and stores the result, moving its index entries.
// Template, creator, creation time, name and signers' names and e-mails
// are fixed at creation, so the search text stays as it is.
func (s *Store) rewrite(tx *bbolt.Tx, c *Contract, now time.Time, fn func(tx *bbolt.Tx, c *Contract) error) error {
	u := uuid.MustParse(c.ID)
	rk := makeRowKey(c.CreationTimestamp, u)
	old := indexEntries(c, rk)
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
	if err := tx.Bucket(bucketContracts).Put(u[:], record); err != nil {
		return err
	}
	rows := tx.Bucket(bucketRows)
	r := row(rows.Get(rk[:]))
	if len(r) < 10 {
		return errors.New("contracts: search row missing for " + c.ID)
	}
	nr := make(row, len(r))
	copy(nr, r)
	nr[0] = statusByte(c.Status)
	nr[1] = placementByte(c.Placement())
	binary.BigEndian.PutUint64(nr[2:10], uint64(c.ExpirationTimestamp.UnixMilli()))
	if err := rows.Put(rk[:], nr); err != nil {
		return err
	}
	return writeIndexes(tx, old, indexEntries(c, rk))
}

// Archive moves contract id to the archive. Archiving an archived
// contract succeeds and keeps the first archivalTimestamp.
func (s *Store) Archive(ctx context.Context, id string) error {
	now := s.now()
	_, err := s.Update(ctx, id, func(_ *bbolt.Tx, c *Contract) error {
		if c.ArchivalTimestamp.IsZero() {
			c.ArchivalTimestamp = now
		}
		return nil
	})
	return err
}

// Delete removes contract id, its row, index entries, signing links and
// (if no other contract holds it) its document copy in one transaction,
// with whatever Config.OnDelete removes.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	u, ok := parseID(id)
	if !ok {
		return errNotFound
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		c, err := load(tx, u)
		if err != nil {
			return err
		}
		rk := makeRowKey(c.CreationTimestamp, u)
		if err := writeIndexes(tx, indexEntries(c, rk), nil); err != nil {
			return err
		}
		if err := addCount(tx, []byte(countAll), -1); err != nil {
			return err
		}
		if err := tx.Bucket(bucketRows).Delete(rk[:]); err != nil {
			return err
		}
		tokens := tx.Bucket(bucketSigningTokens)
		for i := range c.Signers {
			if err := tokens.Delete(c.Signers[i].TokenHash[:]); err != nil {
				return err
			}
		}
		if err := releaseDocument(tx, c.DocumentDigest); err != nil {
			return err
		}
		if err := deleteAttachments(tx, u); err != nil {
			return err
		}
		if s.cfg.OnDelete != nil {
			if err := s.cfg.OnDelete(tx, c); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketContracts).Delete(u[:])
	})
}

// Document returns the title and body copied from the template when c was
// created.
func (s *Store) Document(ctx context.Context, c *Contract) (title, body string, err error) {
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	var d documentRecord
	err = s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketDocuments).Get(c.DocumentDigest)
		if v == nil {
			return errors.New("contracts: document of " + c.ID + " is missing")
		}
		return json.Unmarshal(v, &d)
	})
	return d.Title, d.Body, err
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

// BySigningToken finds the contract and the index of the signer that a
// signing-link token belongs to, or answers a 404 problem. The contract
// shows its effective status.
func (s *Store) BySigningToken(ctx context.Context, token string) (*Contract, int, error) {
	return s.ByTokenHash(ctx, keystore.HashToken(token))
}

// ByTokenHash is BySigningToken for a token already hashed.
func (s *Store) ByTokenHash(ctx context.Context, h keystore.TokenHash) (*Contract, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, -1, err
	}
	var c *Contract
	var signer int
	err := s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketSigningTokens).Get(h[:])
		if len(v) != 32 {
			return errNoSigning
		}
		var err error
		if c, err = load(tx, uuid.UUID(v[:16])); err != nil {
			return err
		}
		signer = c.SignerByID(uuid.UUID(v[16:]).String())
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
	end := millisKey(now)
	// Most sweeps find nothing due; a read transaction tells so without
	// the disk sync of a write.
	due := false
	if err := s.db.View(func(tx *bbolt.Tx) error {
		k, _ := tx.Bucket(bucketByExpiry).Cursor().First()
		due = k != nil && bytes.Compare(k[:8], end[:]) <= 0
		return nil
	}); err != nil || !due {
		return 0, err
	}
	n := 0
	err := s.db.Update(func(tx *bbolt.Tx) error {
		var due []uuid.UUID
		cur := tx.Bucket(bucketByExpiry).Cursor()
		for k, _ := cur.First(); k != nil && bytes.Compare(k[:8], end[:]) <= 0; k, _ = cur.Next() {
			due = append(due, rowKey(k[8:]).id())
			if limit > 0 && len(due) == limit {
				break
			}
		}
		for _, id := range due {
			c, err := load(tx, id)
			if err != nil {
				return err
			}
			if err := s.rewrite(tx, c, now, nil); err != nil {
				return err
			}
		}
		n = len(due)
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
func (s *Store) PutAttachment(tx *bbolt.Tx, c *Contract, fileName string, data []byte) (*Attachment, error) {
	cid, ok := parseID(c.ID)
	if !ok {
		return nil, errors.New("contracts: attachment for a contract without a valid id")
	}
	aid := uuid.New()
	if err := tx.Bucket(bucketAttachments).Put(attachmentKey(cid, aid), data); err != nil {
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
	err := s.db.View(func(tx *bbolt.Tx) error {
		c, err := load(tx, cid)
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
		v := tx.Bucket(bucketAttachments).Get(attachmentKey(cid, aid))
		if v == nil {
			return errors.New("contracts: attachment " + a.ID + " of " + c.ID + " is missing")
		}
		data = bytes.Clone(v)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return a, data, nil
}

func attachmentKey(contract, attachment uuid.UUID) []byte {
	return append(bytes.Clone(contract[:]), attachment[:]...)
}

// deleteAttachments removes every attachment of contract id.
func deleteAttachments(tx *bbolt.Tx, id uuid.UUID) error {
	b := tx.Bucket(bucketAttachments)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(id[:]); k != nil && bytes.HasPrefix(k, id[:]); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
