package share

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/pgdb"
)

// PostgresBackend keeps shares in PostgreSQL (migration 0006_shares.sql):
// table shares holds the record and the columns the list filters and
// sorts on, share_activity the activity. Several instances share it.
type PostgresBackend struct {
	db *pgdb.DB
	// now reads shares for ShareNow, the reads of GETs that come at once
	// in one statement: the opened count and the statement's snapshot as
	// text, then the record's bytes.
	now *pgdb.Lookup[string]
}

// NewPostgresBackend uses db, whose migrations made the share tables.
func NewPostgresBackend(db *pgdb.DB) Backend {
	return &PostgresBackend{db: db, now: pgdb.NewLookup[string](db, "a share",
		`SELECT uuid::text, convert_to(opened_count::text || ' ' || pg_current_snapshot()::text || ' ', 'UTF8') || record
		FROM shares WHERE uuid = ANY($1::text[]::uuid[])`)}
}

var _ Backend = (*PostgresBackend)(nil)

const shareColumns = "opened_count, record"

func scanShare(row pgx.Row) (*Record, error) {
	var opened int64
	var raw []byte
	if err := row.Scan(&opened, &raw); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	r := new(Record)
	if err := json.Unmarshal(raw, r); err != nil {
		return nil, err
	}
	r.OpenedCount = opened
	return r, nil
}

// ShareByUUID implements Backend.
func (*PostgresBackend) ShareByUUID(tx storage.Tx, uuid string, forUpdate bool) (*Record, error) {
	q := "SELECT " + shareColumns + " FROM shares WHERE uuid = $1"
	if forUpdate {
		q += " FOR UPDATE"
	}
	return scanShare(pgdb.Of(tx).QueryRow(context.Background(), q, uuid))
}

// ShareNow implements Backend: one statement shared with the GETs that
// come at once (pgdb.Lookup), which reads the share and the statement's
// snapshot; mark's visibility in it is decided here, as
// pg_visible_in_snapshot decides it.
func (b *PostgresBackend) ShareNow(ctx context.Context, uuid string, mark int64) (*Record, bool, error) {
	v, found, err := b.now.Get(ctx, uuid)
	if err != nil || !found {
		return nil, true, err
	}
	count, rest, ok1 := strings.Cut(string(v), " ")
	snap, raw, ok2 := strings.Cut(rest, " ")
	opened, err := strconv.ParseInt(count, 10, 64)
	if !ok1 || !ok2 || err != nil {
		return nil, false, fmt.Errorf("share %s: an unreadable row", uuid)
	}
	seen, err := visibleIn(snap, mark)
	if err != nil {
		return nil, false, err
	}
	r := new(Record)
	if err := json.Unmarshal([]byte(raw), r); err != nil {
		return nil, false, err
	}
	r.OpenedCount = opened
	return r, seen, nil
}

// visibleIn reports whether transaction xid is visible in snapshot (as
// pg_current_snapshot() writes it: xmin:xmax:xip,...): below xmin, or
// below xmax and not in progress. xid 0 (no transaction) is.
func visibleIn(snapshot string, xid int64) (bool, error) {
	if xid == 0 {
		return true, nil
	}
	parts := strings.SplitN(snapshot, ":", 3)
	if len(parts) != 3 {
		return false, fmt.Errorf("snapshot %q", snapshot)
	}
	xmin, err1 := strconv.ParseInt(parts[0], 10, 64)
	xmax, err2 := strconv.ParseInt(parts[1], 10, 64)
	if err1 != nil || err2 != nil {
		return false, fmt.Errorf("snapshot %q", snapshot)
	}
	switch {
	case xid < xmin:
		return true, nil
	case xid >= xmax:
		return false, nil
	}
	for _, p := range strings.Split(parts[2], ",") {
		if p == strconv.FormatInt(xid, 10) {
			return false, nil
		}
	}
	return true, nil
}

// ShareByID implements Backend.
func (*PostgresBackend) ShareByID(tx storage.Tx, id uint64) (*Record, error) {
	return scanShare(pgdb.Of(tx).QueryRow(context.Background(),
		"SELECT "+shareColumns+" FROM shares WHERE id = $1", int64(id)))
}

// CreateShare implements Backend: the id is the sequence share_id_seq.
func (*PostgresBackend) CreateShare(t storage.Tx, r *Record) error {
	tx := pgdb.Of(t)
	ctx := context.Background()
	var id int64
	if err := tx.QueryRow(ctx, "SELECT nextval('share_id_seq')").Scan(&id); err != nil {
		return err
	}
	r.ID = uint64(id)
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO shares (id, uuid, type, issue_id, project_id, created_by,
		created_at, updated_at, expiration, opened_count, record)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
		id, r.UUID, r.Type, r.IssueID, r.ProjectID, r.CreatedBy, r.CreatedAt, r.UpdatedAt, r.Expiration, r.OpenedCount, raw)
	if err != nil {
		return err
	}
	return adjustPgCounts(tx, r, 1)
}

// pgCountKeys are the counters of share_counts that r belongs to, the
// same as bbolt's (recordCountKeys), in one order for every transaction
// so that concurrent ones lock the rows alike.
func pgCountKeys(r *Record) (kinds, as, bs []string) {
	add := func(k, a, b string) {
		kinds, as, bs = append(kinds, k), append(as, a), append(bs, b)
	}
	add("a", "", "")
	add("c", r.CreatedBy, "")
	if r.IssueID != "" {
		add("i", r.IssueID, "")
	}
	if r.ProjectID != "" {
		add("p", r.ProjectID, "")
		add("x", r.ProjectID, r.CreatedBy)
	}
	return kinds, as, bs
}

// adjustPgCounts adds delta to every counter of r in one statement each
// way, deleting the counters that reach zero.
func adjustPgCounts(tx pgx.Tx, r *Record, delta int64) error {
	kinds, as, bs := pgCountKeys(r)
	ctx := context.Background()
	_, err := tx.Exec(ctx, `INSERT INTO share_counts (kind, a, b, n)
		SELECT k, a, b, $4 FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS x(k, a, b, o) ORDER BY o
		ON CONFLICT (kind, a, b) DO UPDATE SET n = share_counts.n + EXCLUDED.n`, kinds, as, bs, delta)
	if err != nil || delta > 0 {
		return err
	}
	_, err = tx.Exec(ctx, `DELETE FROM share_counts WHERE n <= 0 AND (kind, a, b) IN
		(SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))`, kinds, as, bs)
	return err
}

// pgCountKey is the counter of share_counts that holds the number of q's
// matches when every match is visible and the filters are ones a counter
// keeps, as the bbolt list has it; ok is false when the list has to count.
func pgCountKey(q *ListSpec) (kind, a, b string, ok bool) {
	if q.VisibleTo != nil {
		return "", "", "", false
	}
	switch {
	case q.IssueID != "" && q.ProjectID == "" && q.CreatedBy == "":
		return "i", q.IssueID, "", true
	case q.IssueID != "":
		return "", "", "", false
	case q.ProjectID != "" && q.CreatedBy != "":
		return "x", q.ProjectID, q.CreatedBy, true
	case q.ProjectID != "":
		return "p", q.ProjectID, "", true
	case q.CreatedBy != "":
		return "c", q.CreatedBy, "", true
	}
	return "a", "", "", true
}

// UpdateShare implements Backend. The opening count is left as it is:
// flushes add to it.
func (*PostgresBackend) UpdateShare(t storage.Tx, _, r *Record) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(t).Exec(context.Background(), `UPDATE shares SET type = $2, issue_id = $3, project_id = $4,
		created_by = $5, created_at = $6, updated_at = $7, expiration = $8, record = $9 WHERE id = $1`,
		int64(r.ID), r.Type, r.IssueID, r.ProjectID, r.CreatedBy, r.CreatedAt, r.UpdatedAt, r.Expiration, raw)
	return err
}

// DeleteShare implements Backend; the activity goes with the row.
func (*PostgresBackend) DeleteShare(t storage.Tx, r *Record) error {
	tx := pgdb.Of(t)
	tag, err := tx.Exec(context.Background(), "DELETE FROM shares WHERE id = $1", int64(r.ID))
	if err != nil || tag.RowsAffected() == 0 {
		return err
	}
	return adjustPgCounts(tx, r, -1)
}

// AddActivity implements Backend.
func (*PostgresBackend) AddActivity(t storage.Tx, id uint64, a Activity) error {
	raw, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_, err = pgdb.Of(t).Exec(context.Background(),
		"INSERT INTO share_activity (share_id, ts, entry) VALUES ($1, $2, $3)", int64(id), a.Timestamp, raw)
	return err
}

// Activity implements Backend.
func (*PostgresBackend) Activity(t storage.Tx, id uint64, n int) ([]Activity, error) {
	rows, err := pgdb.Of(t).Query(context.Background(),
		"SELECT entry FROM share_activity WHERE share_id = $1 ORDER BY ts DESC, seq DESC LIMIT $2", int64(id), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make([]Activity, 0, min(n, 64))
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		var a Activity
		if err := json.Unmarshal(raw, &a); err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// AddOpenings implements Backend: one statement adds the count (and locks
// the row, so a delete waits for this transaction or went first, in which
// case nothing is written).
func (*PostgresBackend) AddOpenings(t storage.Tx, id uint64, n int64, entries []Activity) error {
	tx := pgdb.Of(t)
	ctx := context.Background()
	tag, err := tx.Exec(ctx, "UPDATE shares SET opened_count = opened_count + $2 WHERE id = $1", int64(id), n)
	if err != nil || tag.RowsAffected() == 0 || len(entries) == 0 {
		return err
	}
	ts := make([]int64, len(entries))
	raws := make([][]byte, len(entries))
	for i, a := range entries {
		ts[i] = a.Timestamp
		if raws[i], err = json.Marshal(a); err != nil {
			return err
		}
	}
	_, err = tx.Exec(ctx, `INSERT INTO share_activity (share_id, ts, entry)
		SELECT $1, x.ts, x.entry FROM unnest($2::bigint[], $3::bytea[]) WITH ORDINALITY AS x(ts, entry, n)
		ORDER BY x.n`, int64(id), ts, raws)
	return err
}

// Mark implements Backend: the transaction's id.
func (*PostgresBackend) Mark(t storage.Tx) (int64, error) {
	var id int64
	err := pgdb.Of(t).QueryRow(context.Background(), "SELECT pg_current_xact_id()::text::bigint").Scan(&id)
	return id, err
}

// Sees implements Backend: whether the transaction mark committed before
// tx's snapshot was taken.
func (*PostgresBackend) Sees(t storage.Tx, mark int64) (bool, error) {
	var seen bool
	err := pgdb.Of(t).QueryRow(context.Background(),
		"SELECT pg_visible_in_snapshot($1::text::xid8, pg_current_snapshot())", strconv.FormatInt(mark, 10)).Scan(&seen)
	return seen, err
}

// sortColumns are the columns of the list's sorts.
var sortColumns = map[string]string{
	"id": "id", "uuid": "uuid", "type": "type", "issue_id": "issue_id", "project_id": "project_id",
	"created_by": "created_by", "created_at": "created_at", "updated_at": "updated_at",
	"expiration": "expiration", "opened_count": "opened_count",
}

// List implements Backend with the same matches, order and total as the
// bbolt indexes: text columns compare bytes (COLLATE "C"), uuids their 16
// bytes, ties go by id in the sort's direction.
func (*PostgresBackend) List(ctx context.Context, t storage.Tx, q *ListSpec) ([]*Record, int, error) {
	tx := pgdb.Of(t)
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if q.IssueID != "" {
		where = append(where, "s.issue_id = "+arg(q.IssueID))
	}
	if q.ProjectID != "" {
		where = append(where, "s.project_id = "+arg(q.ProjectID))
	}
	if q.CreatedBy != "" {
		where = append(where, "s.created_by = "+arg(q.CreatedBy))
	}
	if c := q.VisibleTo; c != nil {
		// Not a "*" administrator (the plan would not ask), and a share
		// without project is seen by its creator only.
		projects := make([]string, 0, len(c.AdminProjects))
		for _, p := range c.AdminProjects {
			if p != "" {
				projects = append(projects, p)
			}
		}
		where = append(where, "(s.created_by = "+arg(c.Owner)+" OR s.project_id = ANY("+arg(projects)+"::text[]))")
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	col, ok := sortColumns[q.Sort]
	if !ok {
		return nil, 0, errors.New("share: unknown sort " + q.Sort)
	}
	// The total (from its counter, or counted) and the page go in one
	// round trip; a page past the end is empty either way.
	count := "SELECT count(*) FROM shares s" + cond
	countArgs := args
	if kind, a, b, ok := pgCountKey(q); ok {
		count = "SELECT coalesce((SELECT n FROM share_counts WHERE kind = $1 AND a = $2 AND b = $3), 0)"
		countArgs = []any{kind, a, b}
	}
	from := "shares s"
	key := "s." + col
	if q.Sort == "opened_count" && len(q.Pending) > 0 {
		ids := make([]int64, 0, len(q.Pending))
		ns := make([]int64, 0, len(q.Pending))
		for id, n := range q.Pending {
			ids = append(ids, int64(id))
			ns = append(ns, n)
		}
		from = "shares s LEFT JOIN unnest(" + arg(ids) + "::bigint[], " + arg(ns) + "::bigint[]) AS p(id, n) ON p.id = s.id"
		key = "s.opened_count + coalesce(p.n, 0)"
	}
	dir := " ASC"
	if q.Desc {
		dir = " DESC"
	}
	order := key + dir
	if q.Sort != "id" && q.Sort != "uuid" { // both unique
		order += ", s.id" + dir
	}
	page := "SELECT s.opened_count, s.record FROM " + from + cond + " ORDER BY " + order +
		" LIMIT " + arg(q.Limit) + " OFFSET " + arg(q.Offset)
	batch := &pgx.Batch{}
	batch.Queue(count, countArgs...)
	batch.Queue(page, args...)
	br := tx.SendBatch(ctx, batch)
	defer br.Close()
	var total int
	if err := br.QueryRow().Scan(&total); err != nil {
		return nil, 0, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	out := []*Record{}
	for rows.Next() {
		r, err := scanShare(rows)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, r)
	}
	return out, total, rows.Err()
}

var _ SharedUnlockLimit = (*PostgresBackend)(nil)

// ReserveUnlock implements SharedUnlockLimit as a generic cell rate
// algorithm in one statement: tat, the client's theoretical arrival time,
// moves by everyMs per attempt and may lead now by burst attempts.
func (*PostgresBackend) ReserveUnlock(t storage.Tx, id uint64, client string, nowMs, everyMs int64, burst int) (int64, error) {
	tx := pgdb.Of(t)
	ctx := context.Background()
	limit := int64(burst) * everyMs
	var tat int64
	err := tx.QueryRow(ctx, `INSERT INTO share_unlocks (share_id, client, tat) VALUES ($1, $2, $3::bigint + $4::bigint)
		ON CONFLICT (share_id, client) DO UPDATE SET tat = greatest(share_unlocks.tat, $3::bigint) + $4::bigint
		WHERE greatest(share_unlocks.tat, $3::bigint) + $4::bigint - $3::bigint <= $5::bigint
		RETURNING tat`, int64(id), client, nowMs, everyMs, limit).Scan(&tat)
	if err == nil {
		return 0, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, err
	}
	if err := tx.QueryRow(ctx, "SELECT tat FROM share_unlocks WHERE share_id = $1 AND client = $2", int64(id), client).Scan(&tat); err != nil {
		return 0, err
	}
	return max(tat, nowMs) + everyMs - nowMs - limit, nil
}

// CancelUnlock implements SharedUnlockLimit; a client back to a full
// bucket leaves no row.
func (*PostgresBackend) CancelUnlock(t storage.Tx, id uint64, client string, nowMs, everyMs int64) error {
	tx := pgdb.Of(t)
	ctx := context.Background()
	_, err := tx.Exec(ctx, "UPDATE share_unlocks SET tat = greatest(tat - $4::bigint, $3::bigint) WHERE share_id = $1 AND client = $2",
		int64(id), client, nowMs, everyMs)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, "DELETE FROM share_unlocks WHERE share_id = $1 AND client = $2 AND tat <= $3", int64(id), client, nowMs)
	return err
}
