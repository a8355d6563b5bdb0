package contracts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/token"
)

// PostgresBackend keeps templates and contracts in the tables of
// migration 0003_contracts.sql: a narrow row a contract with the columns
// that search filters and orders on (contracts), and beside it the
// record's exact bytes (contract_records).
type PostgresBackend struct {
	db *pgdb.DB
	// records reads the records of Contract, shared by the GETs that
	// come at once.
	records *pgdb.Lookup[uuid.UUID]

	// held remembers, by template id, what HoldTemplate last read of a
	// template whose document was stored, so that the next create from
	// it checks in its transaction that both are still so instead of
	// reading them first.
	heldMu sync.Mutex
	held   map[string]heldTemplate

	// maxCollected is how many matches of a substring search are
	// collected in the scan that counts them; with more, they are
	// counted apart and the page is found in one of the ways below.
	// maxOrderedWalk is how many rows a substring search may expect to
	// read walking an index in its order before it collects and sorts
	// the matches instead: a few milliseconds' worth. (Tests lower both
	// to take every way on a small table.)
	maxCollected, maxOrderedWalk int
}

// heldTemplate is what a create needs of a template: its collection and
// document digest, as of version.
type heldTemplate struct {
	version    int64
	collection string
	digest     [sha256.Size]byte
}

// maxHeldTemplates bounds PostgresBackend.held.
const maxHeldTemplates = 10000

// NewPostgresBackend uses db, already migrated.
func NewPostgresBackend(db *pgdb.DB) Backend {
	return &PostgresBackend{db: db,
		records: pgdb.NewLookup[uuid.UUID](db, "a contract", "SELECT id, record FROM contract_records WHERE id = ANY($1)"),
		held:    make(map[string]heldTemplate), maxCollected: 1000, maxOrderedWalk: 5000}
}

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
		ON CONFLICT (id) DO UPDATE SET record = excluded.record, digest = excluded.digest,
			version = nextval('template_version_seq')
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

// Contract implements Backend: no transaction, and one statement for
// the GETs that come at once (pgdb.Lookup).
func (b *PostgresBackend) Contract(ctx context.Context, id uuid.UUID) (*Contract, error) {
	raw, found, err := b.records.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errNotFound
	}
	return decoded.decode(id, raw)
}

// Load implements Backend. Locking the record locks the contract: every
// change loads it for update first.
func (b *PostgresBackend) Load(ctx context.Context, tx storage.Tx, id uuid.UUID, forUpdate bool) (*Contract, error) {
	q := "SELECT record FROM contract_records WHERE id = $1"
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

// Insert implements Backend: the contract's row, record and signing
// tokens in one statement, queued to go with the commit (nothing reads
// its result; a failure fails the commit).
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
	pgdb.Queue(tx, `WITH c AS (
			INSERT INTO contracts (id, created, template_id, creator_id, name, folded_name, search_text,
				status, archived, expires, document_digest)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $14)),
		r AS (INSERT INTO contract_records (id, record) VALUES ($1, $11))
		INSERT INTO signing_tokens (token_hash, contract_id, signer_id)
		SELECT h, $1, s FROM unnest($12::bytea[], $13::uuid[]) AS t(h, s)`,
		id, c.CreationTimestamp.UnixMilli(), c.TemplateID, c.CreatedByID, c.Name, folded, pgSearchText(searchText),
		int16(statusByte(c.Status)), c.Placement() == PlacementArchived, c.ExpirationTimestamp.UnixMilli(), record,
		hashes, signers, c.DocumentDigest)
	return nil
}

// Replace implements Backend.
func (b *PostgresBackend) Replace(ctx context.Context, tx storage.Tx, _, c *Contract, record []byte) error {
	tag, err := pgdb.Of(tx).Exec(ctx, `WITH r AS (UPDATE contract_records SET record = $5 WHERE id = $1)
		UPDATE contracts SET status = $2, archived = $3, expires = $4 WHERE id = $1`,
		c.ID, int16(statusByte(c.Status)), c.Placement() == PlacementArchived,
		c.ExpirationTimestamp.UnixMilli(), record)
	if err == nil && tag.RowsAffected() == 0 {
		return errors.New("contracts: search row missing for " + c.ID)
	}
	return err
}

// Remove implements Backend in one statement.
func (b *PostgresBackend) Remove(ctx context.Context, tx storage.Tx, c *Contract) error {
	_, err := pgdb.Of(tx).Exec(ctx, `WITH t AS (DELETE FROM signing_tokens WHERE contract_id = $1),
			a AS (DELETE FROM contract_attachments WHERE contract_id = $1),
			r AS (DELETE FROM contract_records WHERE id = $1)
		DELETE FROM contracts WHERE id = $1`, c.ID)
	return err
}

// documentLock is the arguments of the advisory lock that holds the
// document whose digest is the SQL expression d: a class of keygate's
// own, then the digest's first four bytes (another document that shares
// them only makes a release wait a little longer).
func documentLock(d string) string {
	return "1801938031, ('x' || encode(substr(" + d + ", 1, 4), 'hex'))::bit(32)::int"
}

// HoldTemplate implements Backend. The template is read while the lock on
// its document is taken, shared, and then, in a statement of its own and
// so on a snapshot taken once the lock is held, whether the document is
// stored. A release that deletes the document takes the lock exclusive:
// it waits for the creates that hold it and then sees their contracts,
// and a create that comes after it sees the document gone and stores it
// again. Unlike a row lock, the advisory lock writes nothing, however
// many creates hold it at once.
//
// That costs a round trip, which on a small box shared with the database
// is much of a create's cost. So a template read once is remembered, and
// the next create from it only queues the lock and two checks, that the
// template's version and the stored document are as remembered, to go
// with its writes: a check that fails fails the transaction as a
// serialization failure, and the retry reads.
func (b *PostgresBackend) HoldTemplate(ctx context.Context, stx storage.Tx, id string) (string, [sha256.Size]byte, error) {
	b.heldMu.Lock()
	h, ok := b.held[id]
	b.heldMu.Unlock()
	if ok && !pgdb.Retried(stx) {
		pgdb.Queue(stx, "SELECT keygate_check(EXISTS (SELECT 1 FROM templates WHERE id = $1 AND version = $2), 'template') FROM pg_advisory_xact_lock_shared("+
			documentLock("$3::bytea")+")", id, h.version, h.digest[:])
		pgdb.Queue(stx, "SELECT keygate_check(EXISTS (SELECT 1 FROM contract_documents WHERE digest = $1), 'contract document')", h.digest[:])
		return h.collection, h.digest, nil
	}

	tx := pgdb.Of(stx)
	var digest [sha256.Size]byte
	batch := &pgx.Batch{}
	batch.Queue(`SELECT t.record, t.digest, t.version FROM templates t
		CROSS JOIN LATERAL pg_advisory_xact_lock_shared(`+documentLock("t.digest")+`) WHERE t.id = $1`, id)
	batch.Queue(`SELECT t.digest, EXISTS (SELECT 1 FROM contract_documents d WHERE d.digest = t.digest)
		FROM templates t WHERE t.id = $1`, id)
	br := tx.SendBatch(ctx, batch)
	var raw, locked, checked []byte
	var version int64
	var stored bool
	err := br.QueryRow().Scan(&raw, &locked, &version)
	if err == nil {
		err = br.QueryRow().Scan(&checked, &stored)
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil // deleted meanwhile: this create holds what it read
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		b.heldMu.Lock()
		delete(b.held, id)
		b.heldMu.Unlock()
		return "", digest, errNoTemplate
	}
	if err != nil {
		return "", digest, err
	}
	t := new(Template)
	if err := json.Unmarshal(raw, t); err != nil {
		return "", digest, err
	}
	digest = templateDigest(t, locked)
	if !bytes.Equal(checked, digest[:]) || !bytes.Equal(locked, digest[:]) {
		// The template changed between the two statements, or its
		// digest is not stored: hold the document of what was read.
		if stored, err = lockDocument(ctx, stx, digest); err != nil {
			return "", digest, err
		}
		version = -1 // not to be remembered
	}
	if !stored {
		if err := b.storeDocument(ctx, digest, func() ([]byte, error) { return encodeDocument(t) }); err != nil {
			return "", digest, err
		}
	}
	if version >= 0 {
		b.remember(id, heldTemplate{version: version, collection: t.CollectionID, digest: digest})
	}
	return t.CollectionID, digest, nil
}

// HoldDocument implements Backend as HoldTemplate holds a template's
// document: the lock on it taken shared, then stored unless it is.
func (b *PostgresBackend) HoldDocument(ctx context.Context, stx storage.Tx, digest [sha256.Size]byte, doc *Document) error {
	stored, err := lockDocument(ctx, stx, digest)
	if err == nil && !stored {
		err = b.storeDocument(ctx, digest, doc.encode)
	}
	return err
}

// lockDocument takes the lock on the document of digest, shared, for tx
// (see HoldTemplate), and then tells whether it is stored.
func lockDocument(ctx context.Context, stx storage.Tx, digest [sha256.Size]byte) (stored bool, err error) {
	batch := &pgx.Batch{}
	batch.Queue("SELECT 1 FROM pg_advisory_xact_lock_shared("+documentLock("$1::bytea")+")", digest[:])
	batch.Queue("SELECT EXISTS (SELECT 1 FROM contract_documents WHERE digest = $1)", digest[:])
	br := pgdb.Of(stx).SendBatch(ctx, batch)
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&stored)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return stored, err
}

// storeDocument stores the document of digest, as encode makes it, at
// once, in a transaction of its own: in the create's, a second create
// storing it would wait for that one to end, and creates that share a
// transaction (Batch) and store two documents could wait for each
// other. The lock the create holds (lockDocument) keeps it until the
// create has committed its contract; should that fail, the document
// stays, unheld, as the next create from it would store it anyway.
func (b *PostgresBackend) storeDocument(ctx context.Context, digest [sha256.Size]byte, encode func() ([]byte, error)) error {
	doc, err := encode()
	if err != nil {
		return err
	}
	if _, err := b.db.Pool.Exec(ctx, "INSERT INTO contract_documents (digest, document) VALUES ($1, $2) ON CONFLICT (digest) DO NOTHING", digest[:], doc); err != nil {
		return b.db.Wrap("storing a contract document", err)
	}
	return nil
}

func (b *PostgresBackend) remember(id string, h heldTemplate) {
	b.heldMu.Lock()
	defer b.heldMu.Unlock()
	if _, ok := b.held[id]; !ok && len(b.held) >= maxHeldTemplates {
		for k := range b.held { // an arbitrary victim: map order is random
			delete(b.held, k)
			break
		}
	}
	b.held[id] = h
}

// ReleaseDocument implements Backend, after Remove: the document goes
// when no contract holds it. The exclusive lock waits for the creates
// that hold the document (HoldTemplate); the DELETE, a statement of its
// own, then sees the contracts they committed.
func (b *PostgresBackend) ReleaseDocument(ctx context.Context, tx storage.Tx, digest []byte) error {
	batch := &pgx.Batch{}
	batch.Queue("SELECT 1 FROM pg_advisory_xact_lock("+documentLock("$1::bytea")+")", digest)
	batch.Queue(`DELETE FROM contract_documents WHERE digest = $1
		AND NOT EXISTS (SELECT 1 FROM contracts WHERE document_digest = $1)`, digest)
	return pgdb.Of(tx).SendBatch(ctx, batch).Close()
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

// SigningPage implements Backend: one statement on the pool, the token's
// row joined to the contract's record and its document.
func (b *PostgresBackend) SigningPage(ctx context.Context, h token.Hash) (*Contract, uuid.UUID, []byte, error) {
	var cid, sid uuid.UUID
	var raw, doc []byte
	err := b.db.Pool.QueryRow(ctx, `SELECT t.contract_id, t.signer_id, r.record, d.document
		FROM signing_tokens t
		JOIN contract_records r ON r.id = t.contract_id
		JOIN contracts c ON c.id = t.contract_id
		LEFT JOIN contract_documents d ON d.digest = c.document_digest
		WHERE t.token_hash = $1`, h[:]).Scan(&cid, &sid, &raw, &doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, sid, nil, errNoSigning
	}
	if err != nil {
		return nil, sid, nil, b.db.Wrap("reading a signing page", err)
	}
	c, err := decoded.decode(cid, raw)
	return c, sid, doc, err
}

// SigningToken implements Backend.
func (b *PostgresBackend) SigningToken(ctx context.Context, tx storage.Tx, h token.Hash) (uuid.UUID, uuid.UUID, error) {
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

// Search implements Backend, from the transaction's snapshot. The
// conditions are those of the bbolt filter, the orders compare bytes
// (COLLATE "C", uuid) as bbolt does. The page is chosen on the narrow
// rows and only its records are read.
//
// Without a substring the count and the page go in one round trip. With
// one, how to find the page depends on how many match, which the planner
// cannot know (strpos has no statistics, and a substring's share of the
// text is hard to guess). A first scan collects up to maxCollected
// matches (through the trigram index if it can serve): if that is all,
// it counts them and sorts the page out of them in the same statement.
// Otherwise they are counted, and when many match, walking an index in
// the order finds the page after a few rows; when few do (of a large
// table), the matches are collected and sorted instead.
func (b *PostgresBackend) Search(ctx context.Context, stx storage.Tx, q *Query, now time.Time) (int, []*Contract, error) {
	tx := pgdb.Of(stx)
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
	// The page's ids in order (ord), then their records in that order.
	pageRows := func(ids string) string {
		return "SELECT p.n AS ord, r.id, r.record FROM unnest(ARRAY(" + ids + " ORDER BY " + order +
			" LIMIT " + strconv.Itoa(q.PageSize) + " OFFSET " + strconv.Itoa(offset) + ")) WITH ORDINALITY AS p(id, n)" +
			" JOIN contract_records r ON r.id = p.id"
	}
	pageOf := func(ids string) string {
		return "SELECT id, record FROM (" + pageRows(ids) + ") r ORDER BY ord"
	}
	direct := pageOf("SELECT id FROM contracts" + cond)

	if q.Substring == "" {
		pgdb.Last(stx) // [BEGIN, count, page, COMMIT]: one round trip
		batch := &pgx.Batch{}
		batch.Queue("SELECT count(*) FROM contracts"+cond, args...)
		batch.Queue(direct, args...)
		br := tx.SendBatch(ctx, batch)
		defer br.Close()
		var total int
		if err := br.QueryRow().Scan(&total); err != nil {
			return 0, nil, err
		}
		rows, err := br.Query()
		if err != nil {
			return 0, nil, err
		}
		page, err := readPage(rows)
		return total, page, err
	}

	// A few matches are collected in one scan, which counts them and
	// gives the page from them.
	rows, err := tx.Query(ctx, "WITH m AS MATERIALIZED (SELECT id, created, folded_name, name, creator_id FROM contracts"+cond+
		" LIMIT "+strconv.Itoa(b.maxCollected+1)+") SELECT t.n, r.id, r.record FROM (SELECT count(*) AS n FROM m) t"+
		" LEFT JOIN LATERAL ("+pageRows("SELECT id FROM m")+") r ON t.n <= "+strconv.Itoa(b.maxCollected)+" ORDER BY r.ord", args...)
	if err != nil {
		return 0, nil, err
	}
	var total int
	var page []*Contract
	for rows.Next() {
		var id *uuid.UUID
		var raw []byte
		if err := rows.Scan(&total, &id, &raw); err != nil {
			rows.Close()
			return 0, nil, err
		}
		if id == nil {
			continue // no page (past the end, or too many to collect)
		}
		c, err := decoded.decode(*id, raw)
		if err != nil {
			rows.Close()
			return 0, nil, err
		}
		page = append(page, c)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if total <= b.maxCollected {
		return total, page, nil
	}

	// Many match: count them all, then find the page.
	var estimate float64 // of all contracts; below 1 when unknown
	if err := tx.QueryRow(ctx, "SELECT count(*), (SELECT reltuples FROM pg_class WHERE oid = 'contracts'::regclass)::float8 FROM contracts"+cond,
		args...).Scan(&total, &estimate); err != nil {
		return 0, nil, err
	}
	if offset >= total {
		return total, nil, nil
	}
	sql := direct
	// The walk in order reads about (offset+size)·estimate/total rows.
	if q.Order != OrderRandom && estimate >= 1 && float64(offset+q.PageSize)*estimate > float64(total)*float64(b.maxOrderedWalk) {
		sql = "WITH m AS MATERIALIZED (SELECT id, created, folded_name, name, creator_id FROM contracts" + cond + ") " +
			pageOf("SELECT id FROM m")
	}
	if rows, err = tx.Query(ctx, sql, args...); err != nil {
		return 0, nil, err
	}
	page, err = readPage(rows)
	return total, page, err
}

// readPage decodes rows of id and record.
func readPage(rows pgx.Rows) ([]*Contract, error) {
	defer rows.Close()
	var page []*Contract
	for rows.Next() {
		var id uuid.UUID
		var raw []byte
		if err := rows.Scan(&id, &raw); err != nil {
			return nil, err
		}
		c, err := decoded.decode(id, raw)
		if err != nil {
			return nil, err
		}
		page = append(page, c)
	}
	return page, rows.Err()
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
