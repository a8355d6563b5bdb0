package contracts

import (
	"encoding/binary"
	"time"

	"github.com/google/uuid"
)

// The buckets of the contract store, named once. Every index key ends with
// the row key (creation time in big-endian milliseconds, then the 16 bytes
// of the contract id), so each index prefix iterates in creation order and
// a date range is a key range inside any prefix.
var (
	// bucketContracts: contract id (16 bytes) → JSON record (Contract).
	bucketContracts = []byte("contracts")
	// bucketRows: row key → compact row (see encodeRow): what search
	// filters, sorts and matches substrings on without decoding records.
	bucketRows = []byte("contract_rows")
	// bucketByTemplate: templateId \x00 row key.
	bucketByTemplate = []byte("contracts_by_template")
	// bucketByCreator: createdById \x00 row key.
	bucketByCreator = []byte("contracts_by_creator")
	// bucketByTemplateCreator: templateId \x00 createdById \x00 row key.
	bucketByTemplateCreator = []byte("contracts_by_template_creator")
	// bucketByPlacement: placement byte, row key.
	bucketByPlacement = []byte("contracts_by_placement")
	// bucketByStatus: stored status byte, row key.
	bucketByStatus = []byte("contracts_by_status")
	// bucketByExpiry: expiration ms (8 bytes), row key; only contracts
	// stored as sent or ongoing, so "expired" searches and the sweeper
	// find the ones whose time has come without scanning live ones.
	bucketByExpiry = []byte("contracts_by_expiry")
	// bucketCounts: index prefix → uint64 number of entries, the query
	// planner's statistics (see counts.go).
	bucketCounts = []byte("contract_counts")
	// bucketSigningTokens: SHA-256 of a signing-link token → contract id
	// (16 bytes) and signer id (16 bytes).
	bucketSigningTokens = []byte("signing_tokens")
	// bucketDocuments: document digest → JSON {title, body}, the copy of a
	// template made at creation, shared by every contract made from the
	// same template text.
	bucketDocuments = []byte("contract_documents")
	// bucketDocumentRefs: document digest → uint64 number of contracts
	// that hold it, so delete can drop the last copy.
	bucketDocumentRefs = []byte("contract_document_refs")
)

// storeBuckets are created by NewBoltBackend.
var storeBuckets = [][]byte{
	bucketContracts, bucketRows, bucketByTemplate, bucketByCreator,
	bucketByTemplateCreator, bucketByPlacement, bucketByStatus,
	bucketByExpiry, bucketCounts, bucketSigningTokens, bucketDocuments,
	bucketDocumentRefs,
}

const (
	rowKeyLen = 8 + 16
	sep       = 0 // separates ids in composite keys; ids are printable ASCII
)

// rowKey is creation milliseconds (big-endian) followed by the contract id.
type rowKey [rowKeyLen]byte

func makeRowKey(created time.Time, id uuid.UUID) rowKey {
	var k rowKey
	binary.BigEndian.PutUint64(k[:8], uint64(created.UnixMilli()))
	copy(k[8:], id[:])
	return k
}

func (k rowKey) id() uuid.UUID { return uuid.UUID(k[8:]) }

// millisKey is t as 8 big-endian bytes of Unix milliseconds; creation and
// expiry times are after 1970, so byte order is time order.
func millisKey(t time.Time) [8]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(t.UnixMilli()))
	return b
}

func millisOf(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// compose joins parts with \x00 separators and appends the row key.
func compose(k rowKey, parts ...string) []byte {
	n := rowKeyLen
	for _, p := range parts {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, sep)
	}
	return append(b, k[:]...)
}

// prefixOf is the key prefix that compose(…, parts...) keys share.
func prefixOf(parts ...string) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
		b = append(b, sep)
	}
	return b
}

func statusByte(s Status) byte {
	for i, v := range statuses {
		if v == s {
			return byte(i)
		}
	}
	return 0xff
}

func statusOf(b byte) Status {
	if int(b) < len(statuses) {
		return statuses[b]
	}
	return ""
}

func placementByte(p Placement) byte {
	if p == PlacementArchived {
		return 1
	}
	return 0
}

// A row is what search needs of a contract, laid out so that reading it
// takes no allocation:
//
//	[0]      stored status byte
//	[1]      placement byte
//	[2:10]   expiration milliseconds
//	then three length-prefixed (uint16) strings: templateId, createdById,
//	name; then the folded search text: folded name, and each signer's
//	folded full name and e-mail, separated by \x00.
type row []byte

func encodeRow(c *Contract, searchText string) row {
	n := 10 + 6 + len(c.TemplateID) + len(c.CreatedByID) + len(c.Name) + len(searchText)
	b := make([]byte, 10, n)
	b[0] = statusByte(c.Status)
	b[1] = placementByte(c.Placement())
	binary.BigEndian.PutUint64(b[2:10], uint64(c.ExpirationTimestamp.UnixMilli()))
	for _, s := range [...]string{c.TemplateID, c.CreatedByID, c.Name} {
		b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	return append(b, searchText...)
}

func (r row) status() Status       { return statusOf(r[0]) }
func (r row) placement() byte      { return r[1] }
func (r row) expiresMillis() int64 { return millisOf(r[2:10]) }

// fields returns templateId, createdById, name and the search text, all
// slices of r.
func (r row) fields() (template, creator, name, text []byte) {
	rest := r[10:]
	next := func() []byte {
		n := int(binary.BigEndian.Uint16(rest))
		v := rest[2 : 2+n]
		rest = rest[2+n:]
		return v
	}
	template, creator, name = next(), next(), next()
	return template, creator, name, rest
}

// foldedName is the first part of the search text.
func foldedName(text []byte) []byte {
	for i, c := range text {
		if c == sep {
			return text[:i]
		}
	}
	return text
}
