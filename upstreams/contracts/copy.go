package contracts

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// CopyToPostgres copies the templates and contracts of from, a transaction
// of the bbolt backend, into to, one of the PostgreSQL backend whose
// tables are empty (caddy webapi migrate): templates with their digests,
// the documents contracts hold, every contract in every status as its
// stored bytes with the columns that PostgresBackend searches on (the
// search text exactly as the bbolt row keeps it), the signing-link token
// index and the attachments (signed PDFs). Ids, timestamps, token hashes
// and sealed tokens are the stored ones, so links and searches give what
// they gave; each signer's sealed token must open with sealer, the master
// key the copy will be served with, so that creators still see the links.
// now decides the effective status the report counts.
func CopyToPostgres(ctx context.Context, from, to storage.Tx, sealer *seal.Sealer, now time.Time) ([]storage.Copied, error) {
	btx := boltdb.Of(from)
	var report []storage.Copied

	// Templates: the record's bytes and the digest of its document, as
	// templateDocument would compute it for a template from before
	// digests were stored.
	n, err := copyBucket(btx.Bucket(bucketTemplates), pgdb.NewCopier(ctx, to, "templates", "id", "record", "digest"),
		func(k, v []byte, add func(...any) error) error {
			var digest []byte
			if digests := btx.Bucket(bucketTemplateDigests); digests != nil {
				digest = digests.Get(k)
			}
			if len(digest) != 32 {
				var t Template
				if err := json.Unmarshal(v, &t); err != nil {
					return fmt.Errorf("template %q: the stored record does not decode: %w", k, err)
				}
				d := documentDigest(t.Title, t.Body)
				digest = d[:]
			}
			return add(string(k), v, digest)
		})
	if err != nil {
		return nil, err
	}
	report = append(report, storage.Copied{Kind: "templates", N: n})

	// Documents before the contracts that reference them.
	documents := map[string]bool{}
	n, err = copyBucket(btx.Bucket(bucketDocuments), pgdb.NewCopier(ctx, to, "contract_documents", "digest", "document"),
		func(k, v []byte, add func(...any) error) error {
			documents[string(k)] = true
			return add(k, v)
		})
	if err != nil {
		return nil, err
	}
	report = append(report, storage.Copied{Kind: "contract documents", N: n})

	rows := btx.Bucket(bucketRows)
	byStatus := map[Status]int{}
	archived := 0
	// Each contract's search row and, beside it, its record.
	records := pgdb.NewCopier(ctx, to, "contract_records", "id", "record")
	n, err = copyBucket(btx.Bucket(bucketContracts), pgdb.NewCopier(ctx, to, "contracts", "id", "created", "template_id",
		"creator_id", "name", "folded_name", "search_text", "status", "archived", "expires", "document_digest"),
		func(k, v []byte, add func(...any) error) error {
			c := new(Contract)
			if err := json.Unmarshal(v, c); err != nil {
				return fmt.Errorf("contract %x: the stored record does not decode: %w", k, err)
			}
			id, err := uuid.Parse(c.ID)
			if err != nil || !bytes.Equal(id[:], k) {
				return fmt.Errorf("contract %x: the record names id %q", k, c.ID)
			}
			if !documents[string(c.DocumentDigest)] {
				return fmt.Errorf("contract %s: its document (digest %x) is not stored", c.ID, c.DocumentDigest)
			}
			for i := range c.Signers {
				sg := &c.Signers[i]
				if _, err := sealer.Open(sg.SealedToken, tokenAAD(c.ID, sg.ID)); err != nil {
					return fmt.Errorf("contract %s: the signing link of signer %s does not open with this master key (give the gateway's master key file)", c.ID, sg.ID)
				}
			}
			// The search text as the bbolt row holds it; a contract
			// without a row (never written so) gets the text Insert
			// would have made.
			text := searchText(c)
			if rows != nil {
				rk := makeRowKey(c.CreationTimestamp, id)
				if t, ok := storedSearchText(rows.Get(rk[:])); ok {
					text = t
				}
			}
			folded, _, _ := strings.Cut(text, "\x00")
			byStatus[c.EffectiveStatus(now)]++
			if c.Placement() == PlacementArchived {
				archived++
			}
			if err := records.Add(id, v); err != nil {
				return err
			}
			return add(id, c.CreationTimestamp.UnixMilli(), c.TemplateID, c.CreatedByID, c.Name, folded, pgSearchText(text),
				int16(statusByte(c.Status)), c.Placement() == PlacementArchived, c.ExpirationTimestamp.UnixMilli(), c.DocumentDigest)
		})
	if err != nil {
		return nil, err
	}
	if _, err := records.Close(); err != nil {
		return nil, err
	}
	var parts []string
	for _, st := range statuses {
		if byStatus[st] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", st, byStatus[st]))
		}
	}
	note := strings.Join(parts, ", ")
	if archived > 0 {
		note += fmt.Sprintf("; archived %d", archived)
	}
	report = append(report, storage.Copied{Kind: "contracts", N: n, Note: note})

	n, err = copyBucket(btx.Bucket(bucketSigningTokens), pgdb.NewCopier(ctx, to, "signing_tokens", "token_hash", "contract_id", "signer_id"),
		func(k, v []byte, add func(...any) error) error {
			if len(k) != 32 || len(v) != 32 {
				return fmt.Errorf("signing link index entry %x: %d and %d bytes, want 32 and 32", k, len(k), len(v))
			}
			return add(k, uuid.UUID(v[:16]), uuid.UUID(v[16:]))
		})
	if err != nil {
		return nil, err
	}
	report = append(report, storage.Copied{Kind: "signing links", N: n})

	var size int64
	n, err = copyBucket(btx.Bucket(bucketAttachments), pgdb.NewCopier(ctx, to, "contract_attachments", "contract_id", "id", "data"),
		func(k, v []byte, add func(...any) error) error {
			if len(k) != 32 {
				return fmt.Errorf("attachment key %x: %d bytes, want 32", k, len(k))
			}
			size += int64(len(v))
			return add(uuid.UUID(k[:16]), uuid.UUID(k[16:]), v)
		})
	if err != nil {
		return nil, err
	}
	report = append(report, storage.Copied{Kind: "attachments", N: n, Note: fmt.Sprintf("%d bytes", size)})
	return report, nil
}

// copyBucket hands every entry of b (none if b is missing: a file from
// before the bucket existed) to row, which adds the table's row for it to
// out, and returns how many rows were written.
func copyBucket(b *bbolt.Bucket, out *pgdb.Copier, row func(k, v []byte, add func(...any) error) error) (int64, error) {
	if b != nil {
		if err := b.ForEach(func(k, v []byte) error { return row(k, v, out.Add) }); err != nil {
			return 0, err
		}
	}
	return out.Close()
}

// storedSearchText is the search text of a bbolt row (see row), or false
// when r is not a whole row.
func storedSearchText(r row) (string, bool) {
	rest := r
	if len(rest) < 10 {
		return "", false
	}
	rest = rest[10:]
	for range 3 {
		if len(rest) < 2 {
			return "", false
		}
		n := 2 + int(binary.BigEndian.Uint16(rest))
		if len(rest) < n {
			return "", false
		}
		rest = rest[n:]
	}
	return string(rest), true
}
