package contracts

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/keystore"
)

// PostgresBackend keeps templates and contracts in the tables of
// migration 0003_contracts.sql: one row a contract, with the columns that
// search filters and orders on beside the record's exact bytes.
type PostgresBackend struct{ db *pgdb.DB }

// NewPostgresBackend uses db, already migrated.
func NewPostgresBackend(db *pgdb.DB) *PostgresBackend { return &PostgresBackend{db: db} }

var (
	_ Backend         = (*PostgresBackend)(nil)
	_ TemplateBackend = (*PostgresBackend)(nil)
)

// PutTemplate implements TemplateBackend in one statement: xmax = 0 tells
// an inserted row from an updated one.
func (b *PostgresBackend) PutTemplate(ctx context.Context, tx storage.Tx, t *Template, digest [32]byte, replace bool) (bool, error) {
	val, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	if !replace {
		tag, err := pgdb.Of(tx).Exec(ctx, `INSERT INTO templates (id, record, digest) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO NOTHING`, t.ID, val, digest[:])
		if err != nil {
			return false, err
		}
		if tag.RowsAffected() == 0 {
			return false, errTemplateExists
		}
		return true, nil
	}
	var created bool
	err = pgdb.Of(tx).QueryRow(ctx, `INSERT INTO templates (id, record, digest) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET record = excluded.record, digest = excluded.digest
		RETURNING xmax = 0`, t.ID, val, digest[:]).Scan(&created)
	return created, err
}

// Template implements TemplateBackend.
func (b *PostgresBackend) Template(ctx context.Context, tx storage.Tx, id string) (*Template, []byte, error) {
	var raw, digest []byte
	err := pgdb.Of(tx).QueryRow(ctx, "SELECT record, digest FROM templates WHERE id = $1", id).Scan(&raw, &digest)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, errNoTemplate
	}
	if err != nil {
		return nil, nil, err
	}
	t := new(Template)
	if err := json.Unmarshal(raw, t); err != nil {
		return nil, nil, err
	}
	return t, digest, nil
}

// Templates implements TemplateBackend.
func (b *PostgresBackend) Templates(ctx context.Context, tx storage.Tx) ([]Template, error) {
	rows, err := pgdb.Of(tx).Query(ctx, "SELECT record FROM templates ORDER BY id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []Template{}
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		var t Template
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		list = append(list, t)
	}
	return list, rows.Err()
}

// DeleteTemplate implements TemplateBackend.
func (b *PostgresBackend) DeleteTemplate(ctx context.Context, tx storage.Tx, id string) error {
	tag, err := pgdb.Of(tx).Exec(ctx, "DELETE FROM templates WHERE id = $1", id)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return errNoTemplate
	}
	return nil
}

// Contract implements Backend: one statement on the pool, no transaction.
func (b *PostgresBackend) Contract(ctx context.Context, id uuid.UUID) (*Contract, error) {
	ctx, cancel := context.WithTimeout(ctx, pgdb.DefaultTimeout)
	defer cancel()
	var raw []byte
	err := b.db.Pool.QueryRow(ctx, "SELECT record FROM contracts WHERE id = $1", id).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, b.db.Wrap("reading a contract", err)
	}
	return decoded.decode(id, raw)
}

// Load implements Backend.
func (b *PostgresBackend) Load(ctx context.Context, tx storage.Tx, id uuid.UUID, forUpdate bool) (*Contract, error) {
	q := "SELECT record FROM contracts WHERE id = $1"
	if forUpdate {
		q += " FOR UPDATE"
	}
	var raw []byte
	err := pgdb.Of(tx).QueryRow(ctx, q, id).Scan(&raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errNotFound
	}
	if err != nil {
		return nil, err
	}
	return decoded.decode(id, raw)
}

// pgSearchText is the search text as PostgreSQL text, which holds no NUL:
// values separated by U+0001 instead, which no query holds either.
func pgSearchText(s string) string { return strings.ReplaceAll(s, "\x00", "\x01") }

// Insert implements Backend: the contract and its signing tokens in one
// statement.
func (b *PostgresBackend) Insert(ctx context.Context, tx storage.Tx, c *Contract, record []byte, searchText string) error {
	id, err := uuid.Parse(c.ID)
	if err != nil {
		return err
	}
	hashes := make([][]byte, len(c.Signers))
	signers := make([]uuid.UUID, len(c.Signers))
	for i := range c.Signers {
		hashes[i] = c.Signers[i].TokenHash[:]
		if signers[i], err = uuid.Parse(c.Signers[i].ID); err != nil {
			return err
		}
	}
	folded, _, _ := strings.Cut(searchText, "\x00")
	_, err = pgdb.Of(tx).Exec(ctx, `WITH c AS (
			INSERT INTO contracts (id, created, template_id, creator_id, name, folded_name, search_text,
				status, archived, expires, record, document_digest)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $14))
		INSERT INTO signing_tokens (token_hash, contract_id, signer_id)
		SELECT h, $1, s FROM unnest($12::bytea[], $13::uuid[]) AS t(h, s)`,
		id, c.CreationTimestamp.UnixMilli(), c.TemplateID, c.CreatedByID, c.Name, folded, pgSearchText(searchText),
		int16(statusByte(c.Status)), c.Placement() == PlacementArchived, c.ExpirationTimestamp.UnixMilli(), record,
		hashes, signers, c.DocumentDigest)
	return err
}

// Replace implements Backend.
func (b *PostgresBackend) Replace(ctx context.Context, tx storage.Tx, _, c *Contract, record []byte) error {
	tag, err := pgdb.Of(tx).Exec(ctx, `UPDATE contracts SET status = $2, archived = $3, expires = $4, record = $5
		WHERE id = $1`, c.ID, int16(statusByte(c.Status)), c.Placement() == PlacementArchived,
		c.ExpirationTimestamp.UnixMilli(), record)
	if err == nil && tag.RowsAffected() == 0 {
		return errors.New("contracts: search row missing for " + c.ID)
	}
	return err
}

// Remove implements Backend in one statement.
func (b *PostgresBackend) Remove(ctx context.Context, tx storage.Tx, c *Contract) error {
	_, err := pgdb.Of(tx).Exec(ctx, `WITH t AS (DELETE FROM signing_tokens WHERE contract_id = $1),
			a AS (DELETE FROM contract_attachments WHERE contract_id = $1)
		DELETE FROM contracts WHERE id = $1`, c.ID)
	return err
}

// HoldDocument implements Backend. It takes a shared lock on the
// document, which creates from one template hold together and a delete of
// its last holder waits for; the contract's foreign key then keeps it.
func (b *PostgresBackend) HoldDocument(ctx context.Context, tx storage.Tx, digest []byte, encode func() ([]byte, error)) error {
	var one int
	err := pgdb.Of(tx).QueryRow(ctx, "SELECT 1 FROM contract_documents WHERE digest = $1 FOR KEY SHARE", digest).Scan(&one)
	if !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	doc, err := encode()
	if err != nil {
		return err
	}
	_, err = pgdb.Of(tx).Exec(ctx, "INSERT INTO contract_documents (digest, document) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING", digest, doc)
	return err
}

// ReleaseDocument implements Backend, after Remove: the document goes
// when no contract holds it. A contract made meanwhile by a transaction
// that commits first makes the foreign key refuse the delete; the
// document then stays, which is right, and the savepoint keeps tx usable.
func (b *PostgresBackend) ReleaseDocument(ctx context.Context, tx storage.Tx, digest []byte) error {
	sp, err := pgdb.Of(tx).Begin(ctx)
	if err != nil {
		return err
	}
	_, err = sp.Exec(ctx, `DELETE FROM contract_documents WHERE digest = $1
		AND NOT EXISTS (SELECT 1 FROM contracts WHERE document_digest = $1)`, digest)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return sp.Rollback(ctx)
	}
	if err != nil {
		sp.Rollback(ctx)
		return err
	}
	return sp.Commit(ctx)
}

// Document implements Backend.
func (b *PostgresBackend) Document(ctx context.Context, tx storage.Tx, digest []byte) ([]byte, error) {
	var doc []byte
	err := pgdb.Of(tx).QueryRow(ctx, "SELECT document FROM contract_documents WHERE digest = $1", digest).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return doc, err
}

// SigningToken implements Backend.
func (b *PostgresBackend) SigningToken(ctx context.Context, tx storage.Tx, h keystore.TokenHash) (uuid.UUID, uuid.UUID, error) {
	var c, s uuid.UUID
	err := pgdb.Of(tx).QueryRow(ctx, "SELECT contract_id, signer_id FROM signing_tokens WHERE token_hash = $1", h[:]).Scan(&c, &s)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, s, errNoSigning
	}
	return c, s, err
}

// PutAttachment implements Backend.
func (b *PostgresBackend) PutAttachment(ctx context.Context, tx storage.Tx, cid, aid uuid.UUID, data []byte) error {
	_, err := pgdb.Of(tx).Exec(ctx, `INSERT INTO contract_attachments (contract_id, id, data) VALUES ($1, $2, $3)
		ON CONFLICT (contract_id, id) DO UPDATE SET data = excluded.data`, cid, aid, data)
	return err
}

// Attachment implements Backend.
func (b *PostgresBackend) Attachment(ctx context.Context, tx storage.Tx, cid, aid uuid.UUID) ([]byte, error) {
	var data []byte
	err := pgdb.Of(tx).QueryRow(ctx, "SELECT data FROM contract_attachments WHERE contract_id = $1 AND id = $2", cid, aid).Scan(&data)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return data, err
}

// Expiring implements Backend through the partial expiry index.
func (b *PostgresBackend) Expiring(ctx context.Context, tx storage.Tx, now time.Time, limit int) ([]uuid.UUID, error) {
	q := "SELECT id FROM contracts WHERE status IN (0, 1) AND expires <= $1 ORDER BY expires, created, id"
	args := []any{now.UnixMilli()}
	if limit > 0 {
		q += " LIMIT $2"
		args = append(args, limit)
	}
	rows, err := pgdb.Of(tx).Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// Search implements Backend: the count and the page in one round trip,
// from the transaction's snapshot. The conditions are those of the bbolt
// filter, the orders compare bytes (COLLATE "C", uuid) as bbolt does.
func (b *PostgresBackend) Search(ctx context.Context, tx storage.Tx, q *Query, now time.Time) (int, []*Contract, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.TemplateID != "" {
		where = append(where, "template_id = "+arg(q.TemplateID))
	}
	if q.CreatorID != "" {
		where = append(where, "creator_id = "+arg(q.CreatorID))
	}
	if !q.From.IsZero() {
		where = append(where, "created >= "+arg(q.From.UnixMilli()))
	}
	if !q.To.IsZero() {
		where = append(where, "created < "+arg(q.To.UnixMilli()))
	}
	if q.Placement != "" {
		where = append(where, "archived = "+arg(q.Placement == PlacementArchived))
	}
	if q.Statuses != nil {
		var final, live []int16
		expired := false
		for _, st := range q.Statuses {
			switch {
			case st.live():
				live = append(live, int16(statusByte(st)))
			case st == StatusExpired:
				expired = true
				final = append(final, int16(statusByte(st)))
			default:
				final = append(final, int16(statusByte(st)))
			}
		}
		var or []string
		if len(final) > 0 {
			or = append(or, "status = ANY("+arg(final)+"::smallint[])")
		}
		nowMs := now.UnixMilli()
		if len(live) > 0 {
			or = append(or, "(status = ANY("+arg(live)+"::smallint[]) AND expires > "+arg(nowMs)+")")
		}
		if expired {
			or = append(or, "(status IN (0, 1) AND expires <= "+arg(nowMs)+")")
		}
		where = append(where, "("+strings.Join(or, " OR ")+")")
	}
	switch {
	case q.Substring == "":
	case trigrams(q.Substring):
		esc := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(q.Substring)
		where = append(where, "search_text LIKE "+arg("%"+esc+"%"))
	default:
		// No trigram to look up: the GIN index would read all of itself,
		// so the rows are scanned instead, as bbolt does.
		where = append(where, "strpos(search_text, "+arg(q.Substring)+") > 0")
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var order string
	switch q.Order {
	case OrderCreationDateAsc:
		order = "created, id"
	case OrderCreationDateDesc:
		order = "created DESC, id"
	case OrderNameAsc:
		order = "folded_name, name, id"
	case OrderNameDesc:
		order = "folded_name DESC, name DESC, id"
	case OrderCreatorIDAsc:
		order = "creator_id, id"
	case OrderCreatorIDDesc:
		order = "creator_id DESC, id"
	default:
		order = "random()"
	}
	offset := 0
	if q.Order != OrderRandom {
		offset = (q.Page - 1) * q.PageSize
	}
	batch := &pgx.Batch{}
	batch.Queue("SELECT count(*) FROM contracts"+cond, args...)
	batch.Queue("SELECT id, record FROM contracts"+cond+" ORDER BY "+order+
		" LIMIT "+strconv.Itoa(q.PageSize)+" OFFSET "+strconv.Itoa(offset), args...)
	br := pgdb.Of(tx).SendBatch(ctx, batch)
	defer br.Close()
	var total int64
	if err := br.QueryRow().Scan(&total); err != nil {
		return 0, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var page []*Contract
	for rows.Next() {
		var id uuid.UUID
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return 0, nil, err
		}
		c, err := decoded.decode(id, raw)
		if err != nil {
			return 0, nil, err
		}
		page = append(page, c)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	return int(total), page, nil
}

// trigrams tells whether pg_trgm finds a trigram in s to look up: a run of
// three letters or digits.
func trigrams(s string) bool {
	n := 0
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if n++; n == 3 {
				return true
			}
		} else {
			n = 0
		}
	}
	return false
}
