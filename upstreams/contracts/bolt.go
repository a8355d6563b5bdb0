package contracts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/token"
)

// BoltBackend keeps templates and contracts in the buckets of the bbolt
// file shared with the other APIs (bolt_keys.go names them and their
// encodings).
type BoltBackend struct{ db *boltdb.DB }

// NewBoltBackend creates the template and contract buckets in db.
func NewBoltBackend(db *boltdb.DB) (Backend, error) {
	if err := db.CreateBuckets(append([][]byte{bucketTemplates, bucketTemplateDigests, bucketAttachments}, storeBuckets...)...); err != nil {
		return nil, err
	}
	return &BoltBackend{db: db}, nil
}

var (
	_ Backend         = (*BoltBackend)(nil)
	_ TemplateBackend = (*BoltBackend)(nil)
)

// PutTemplate implements TemplateBackend.
func (b *BoltBackend) PutTemplate(_ context.Context, stx storage.Tx, t *Template, digest [32]byte, replace bool) (bool, error) {
	val, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	tx := boltdb.Of(stx)
	bk := tx.Bucket(bucketTemplates)
	created := bk.Get([]byte(t.ID)) == nil
	if !created && !replace {
		return false, errTemplateExists
	}
	if err := bk.Put([]byte(t.ID), val); err != nil {
		return false, err
	}
	return created, tx.Bucket(bucketTemplateDigests).Put([]byte(t.ID), digest[:])
}

var errTemplateExists = problem.New(http.StatusConflict, problem.CodeConflict, "a template with this id exists: replace it with PUT /webapi/templates/{id} on the admin endpoint, or remove it first (caddy webapi templates remove ID)")

// Template implements TemplateBackend.
func (b *BoltBackend) Template(_ context.Context, stx storage.Tx, id string) (*Template, []byte, error) {
	tx := boltdb.Of(stx)
	v := tx.Bucket(bucketTemplates).Get([]byte(id))
	if v == nil {
		return nil, nil, errNoTemplate
	}
	t := new(Template)
	if err := json.Unmarshal(v, t); err != nil {
		return nil, nil, err
	}
	var digest []byte
	if d := tx.Bucket(bucketTemplateDigests).Get([]byte(id)); len(d) == 32 {
		digest = bytes.Clone(d)
	}
	return t, digest, nil
}

// Templates implements TemplateBackend.
func (b *BoltBackend) Templates(_ context.Context, stx storage.Tx) ([]Template, error) {
	list := []Template{}
	err := boltdb.Of(stx).Bucket(bucketTemplates).ForEach(func(_, v []byte) error {
		var t Template
		if err := json.Unmarshal(v, &t); err != nil {
			return err
		}
		list = append(list, t)
		return nil
	})
	return list, err
}

// DeleteTemplate implements TemplateBackend.
func (b *BoltBackend) DeleteTemplate(_ context.Context, stx storage.Tx, id string) error {
	tx := boltdb.Of(stx)
	bk := tx.Bucket(bucketTemplates)
	if bk.Get([]byte(id)) == nil {
		return errNoTemplate
	}
	if err := tx.Bucket(bucketTemplateDigests).Delete([]byte(id)); err != nil {
		return err
	}
	return bk.Delete([]byte(id))
}

// Contract implements Backend.
func (b *BoltBackend) Contract(ctx context.Context, id uuid.UUID) (*Contract, error) {
	var c *Contract
	err := b.db.View(ctx, func(tx storage.Tx) error {
		var err error
		c, err = boltLoad(boltdb.Of(tx), id)
		return err
	})
	return c, err
}

// Load implements Backend; bbolt serialises writers, so nothing is locked.
func (b *BoltBackend) Load(_ context.Context, tx storage.Tx, id uuid.UUID, _ bool) (*Contract, error) {
	return boltLoad(boltdb.Of(tx), id)
}

// boltLoad reads and decodes contract id inside tx; the decoded value owns
// its memory, so it outlives the transaction.
func boltLoad(tx *bbolt.Tx, id uuid.UUID) (*Contract, error) {
	v := tx.Bucket(bucketContracts).Get(id[:])
	if v == nil {
		return nil, errNotFound
	}
	return decoded.decode(id, v)
}

// Insert implements Backend.
func (b *BoltBackend) Insert(_ context.Context, stx storage.Tx, c *Contract, record []byte, searchText string) error {
	tx := boltdb.Of(stx)
	id, err := uuid.Parse(c.ID)
	if err != nil {
		return err
	}
	rk := makeRowKey(c.CreationTimestamp, id)
	if err := tx.Bucket(bucketContracts).Put(id[:], record); err != nil {
		return err
	}
	if err := tx.Bucket(bucketRows).Put(rk[:], encodeRow(c, searchText)); err != nil {
		return err
	}
	if err := writeIndexes(tx, nil, indexEntries(c, rk)); err != nil {
		return err
	}
	if err := addCount(tx, []byte(countAll), 1); err != nil {
		return err
	}
	tokens := tx.Bucket(bucketSigningTokens)
	for i := range c.Signers {
		sid, err := uuid.Parse(c.Signers[i].ID)
		if err != nil {
			return err
		}
		v := make([]byte, 0, 32)
		v = append(append(v, id[:]...), sid[:]...)
		if err := tokens.Put(c.Signers[i].TokenHash[:], v); err != nil {
			return err
		}
	}
	return nil
}

// Replace implements Backend.
func (b *BoltBackend) Replace(_ context.Context, stx storage.Tx, before, c *Contract, record []byte) error {
	tx := boltdb.Of(stx)
	u, err := uuid.Parse(c.ID)
	if err != nil {
		return err
	}
	rk := makeRowKey(c.CreationTimestamp, u)
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
	return writeIndexes(tx, indexEntries(before, rk), indexEntries(c, rk))
}

// Remove implements Backend.
func (b *BoltBackend) Remove(_ context.Context, stx storage.Tx, c *Contract) error {
	tx := boltdb.Of(stx)
	u, err := uuid.Parse(c.ID)
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
	if err := deleteAttachments(tx, u); err != nil {
		return err
	}
	return tx.Bucket(bucketContracts).Delete(u[:])
}

// HoldTemplate implements Backend.
func (b *BoltBackend) HoldTemplate(ctx context.Context, stx storage.Tx, id string) (string, [sha256.Size]byte, error) {
	t, stored, err := b.Template(ctx, stx, id)
	if err != nil {
		return "", [sha256.Size]byte{}, err
	}
	digest := templateDigest(t, stored)
	return t.CollectionID, digest, hold(stx, digest, func() ([]byte, error) { return encodeDocument(t) })
}

// HoldDocument implements Backend.
func (b *BoltBackend) HoldDocument(_ context.Context, stx storage.Tx, digest [sha256.Size]byte, doc *Document) error {
	return hold(stx, digest, doc.encode)
}

// hold stores the document of digest, as encode makes it, if no contract
// holds it yet, and counts one more holder.
func hold(stx storage.Tx, digest [sha256.Size]byte, encode func() ([]byte, error)) error {
	tx := boltdb.Of(stx)
	docs := tx.Bucket(bucketDocuments)
	if docs.Get(digest[:]) == nil {
		encoded, err := encode()
		if err != nil {
			return err
		}
		if err := docs.Put(digest[:], encoded); err != nil {
			return err
		}
	}
	return bump(tx.Bucket(bucketDocumentRefs), digest[:], 1)
}

// ReleaseDocument implements Backend.
func (b *BoltBackend) ReleaseDocument(_ context.Context, stx storage.Tx, digest []byte) error {
	tx := boltdb.Of(stx)
	refs := tx.Bucket(bucketDocumentRefs)
	if err := bump(refs, digest, -1); err != nil {
		return err
	}
	if refs.Get(digest) == nil {
		return tx.Bucket(bucketDocuments).Delete(digest)
	}
	return nil
}

// Document implements Backend.
func (b *BoltBackend) Document(_ context.Context, stx storage.Tx, digest []byte) ([]byte, error) {
	return bytes.Clone(boltdb.Of(stx).Bucket(bucketDocuments).Get(digest)), nil
}

// SigningPage implements Backend with one read transaction.
func (b *BoltBackend) SigningPage(ctx context.Context, h token.Hash) (c *Contract, sid uuid.UUID, doc []byte, err error) {
	err = b.db.View(ctx, func(tx storage.Tx) error {
		var cid uuid.UUID
		if cid, sid, err = b.SigningToken(ctx, tx, h); err != nil {
			return err
		}
		if c, err = b.Load(ctx, tx, cid, false); err != nil {
			return err
		}
		doc, err = b.Document(ctx, tx, c.DocumentDigest)
		return err
	})
	return c, sid, doc, err
}

// SigningToken implements Backend.
func (b *BoltBackend) SigningToken(_ context.Context, stx storage.Tx, h token.Hash) (uuid.UUID, uuid.UUID, error) {
	v := boltdb.Of(stx).Bucket(bucketSigningTokens).Get(h[:])
	if len(v) != 32 {
		return uuid.UUID{}, uuid.UUID{}, errNoSigning
	}
	return uuid.UUID(v[:16]), uuid.UUID(v[16:]), nil
}

// PutAttachment implements Backend.
func (b *BoltBackend) PutAttachment(_ context.Context, stx storage.Tx, cid, aid uuid.UUID, data []byte) error {
	return boltdb.Of(stx).Bucket(bucketAttachments).Put(attachmentKey(cid, aid), data)
}

// Attachment implements Backend.
func (b *BoltBackend) Attachment(_ context.Context, stx storage.Tx, cid, aid uuid.UUID) ([]byte, error) {
	return bytes.Clone(boltdb.Of(stx).Bucket(bucketAttachments).Get(attachmentKey(cid, aid))), nil
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

// Expiring implements Backend.
func (b *BoltBackend) Expiring(_ context.Context, stx storage.Tx, now time.Time, limit int) ([]uuid.UUID, error) {
	end := millisKey(now)
	var due []uuid.UUID
	cur := boltdb.Of(stx).Bucket(bucketByExpiry).Cursor()
	for k, _ := cur.First(); k != nil && bytes.Compare(k[:8], end[:]) <= 0; k, _ = cur.Next() {
		due = append(due, rowKey(k[8:]).id())
		if limit > 0 && len(due) == limit {
			break
		}
	}
	return due, nil
}
