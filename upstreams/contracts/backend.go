package contracts

import (
	"context"
	"crypto/sha256"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/token"
)

// TemplateBackend stores the template registry: templates by id with the
// digest of their document (title and body). BoltBackend and
// PostgresBackend implement it. Every method works inside tx, a
// transaction of the storage.DB the backend was made for.
type TemplateBackend interface {
	// PutTemplate stores t with digest. An existing id is replaced if
	// replace, else the answer is a 409 conflict problem; created tells
	// whether the id was new.
	PutTemplate(ctx context.Context, tx storage.Tx, t *Template, digest [32]byte, replace bool) (created bool, err error)
	// Template reads template id with its document digest (nil when the
	// template predates digests), or answers the 404 errNoTemplate.
	Template(ctx context.Context, tx storage.Tx, id string) (t *Template, digest []byte, err error)
	// Templates lists every template, ordered by id (byte order).
	Templates(ctx context.Context, tx storage.Tx) ([]Template, error)
	// DeleteTemplate removes template id with its digest, or answers the
	// 404 errNoTemplate.
	DeleteTemplate(ctx context.Context, tx storage.Tx, id string) error
}

// Backend stores contracts with what finds them: their search rows and
// indexes, the documents they hold (counted, so the last holder's delete
// drops a document), the signing-token index, their attachments and the
// expiry index. BoltBackend and PostgresBackend implement it; every method
// but Contract works inside tx. The Store decides; a Backend only stores,
// loads, indexes and queries, answering the 404 problems the Store would.
// It keeps the template registry too (HoldTemplate reads it), so a
// Backend is the TemplateBackend of the same database.
type Backend interface {
	TemplateBackend

	// Contract reads contract id on its own, outside any transaction of
	// the caller (one round trip where the database allows), or answers
	// errNotFound.
	Contract(ctx context.Context, id uuid.UUID) (*Contract, error)
	// Load reads contract id in tx, or answers errNotFound. forUpdate
	// locks it until tx ends, for a read-to-modify.
	Load(ctx context.Context, tx storage.Tx, id uuid.UUID, forUpdate bool) (*Contract, error)
	// Insert stores new contract c, encoded as record, with its search row
	// (searchText is the folded text substring search looks in), its
	// indexes and its signers' token hashes.
	Insert(ctx context.Context, tx storage.Tx, c *Contract, record []byte, searchText string) error
	// Replace stores c, encoded as record, in place of before (c as it
	// was loaded in tx), moving its index entries. Template, creator,
	// creation time, name and signers do not change.
	Replace(ctx context.Context, tx storage.Tx, before, c *Contract, record []byte) error
	// Remove deletes c with its search row, indexes, signing tokens and
	// attachments. Its document is released by the Store.
	Remove(ctx context.Context, tx storage.Tx, c *Contract) error

	// HoldTemplate reads template id (the 404 errNoTemplate if there is
	// none): its collection and the digest of its document; and it holds
	// that document for a contract about to be inserted in tx: it stores
	// the document if no contract holds it yet, and counts one more
	// holder. One call, so that a backend across a network can make it
	// one round trip, or none.
	HoldTemplate(ctx context.Context, tx storage.Tx, id string) (collection string, digest [sha256.Size]byte, err error)
	// HoldDocument holds doc, whose digest is digest, for a contract
	// about to be inserted in tx, as HoldTemplate holds a template's: a
	// page of the issue tracker, read before tx began.
	HoldDocument(ctx context.Context, tx storage.Tx, digest [sha256.Size]byte, doc *Document) error
	// ReleaseDocument counts one contract fewer holding digest and
	// deletes the document when none is left. It comes after the Remove
	// of the contract that held it.
	ReleaseDocument(ctx context.Context, tx storage.Tx, digest []byte) error
	// Document reads the stored document digest (an encoded Document),
	// nil if none is stored.
	Document(ctx context.Context, tx storage.Tx, digest []byte) ([]byte, error)

	// SigningToken finds the contract and signer that a signing-link
	// token hash belongs to, or answers errNoSigning.
	SigningToken(ctx context.Context, tx storage.Tx, h token.Hash) (contract, signer uuid.UUID, err error)
	// SigningPage reads, outside any transaction, what a signing page
	// shows: the contract and signer of a signing-link token hash, and
	// the contract's stored document (nil if missing); errNoSigning for
	// an unknown token. One statement on PostgreSQL.
	SigningPage(ctx context.Context, h token.Hash) (c *Contract, signer uuid.UUID, document []byte, err error)

	// PutAttachment stores data as attachment aid of contract cid.
	PutAttachment(ctx context.Context, tx storage.Tx, cid, aid uuid.UUID, data []byte) error
	// Attachment reads attachment aid of contract cid, nil if missing.
	Attachment(ctx context.Context, tx storage.Tx, cid, aid uuid.UUID) ([]byte, error)

	// Expiring lists up to limit (all if limit ≤ 0) contracts stored as
	// sent or ongoing whose expiration is at or before now, in order of
	// expiration.
	Expiring(ctx context.Context, tx storage.Tx, now time.Time, limit int) ([]uuid.UUID, error)

	// Search runs q at now (which decides effective expiry) and returns
	// the number of all matches and the page's contracts as stored, in
	// q's order: ties by ascending id; random gives a sample of the
	// matches, ignoring page. It is the whole of tx, which it may end.
	Search(ctx context.Context, tx storage.Tx, q *Query, now time.Time) (total int, page []*Contract, err error)
}
