package share

import (
	"context"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
)

// Backend is the persistence of shares, in the share domain's words: the
// share records (by id and by uuid), the list with its filters, orders and
// counts, the activity entries, and the openings that Store.Flush writes.
// Validation, visibility, passwords, the unlock cookie and limiter, and the
// in-memory batch of page views stay in Store, written once. Every method
// runs in the transaction tx that Store opened on its storage.DB; bolt.go
// and postgres.go implement it.
type Backend interface {
	// ShareByUUID reads the share named uuid (canonical form); nil when
	// absent. forUpdate: tx is about to change or delete it (PostgreSQL
	// locks the row).
	ShareByUUID(tx storage.Tx, uuid string, forUpdate bool) (*Record, error)
	// ShareNow reads the share named uuid (canonical form) outside any
	// transaction: one statement on PostgreSQL, no BEGIN or COMMIT around
	// it. seen reports whether that read sees the writes of the
	// transaction marked mark (true for mark 0), as Sees would.
	ShareNow(ctx context.Context, uuid string, mark int64) (r *Record, seen bool, err error)
	// ShareByID reads share id; nil when absent.
	ShareByID(tx storage.Tx, id uint64) (*Record, error)
	// CreateShare stores a new share, giving it the next id (r.ID).
	CreateShare(tx storage.Tx, r *Record) error
	// UpdateShare replaces old, read in tx, with r (same id and uuid).
	UpdateShare(tx storage.Tx, old, r *Record) error
	// DeleteShare removes r, its indexes and its activity.
	DeleteShare(tx storage.Tx, r *Record) error
	// AddActivity appends an entry to share id's activity.
	AddActivity(tx storage.Tx, id uint64, a Activity) error
	// Activity reads at most n entries of share id, newest first (ties:
	// the later written first).
	Activity(tx storage.Tx, id uint64, n int) ([]Activity, error)
	// AddOpenings adds n openings to share id's count and appends its
	// page entries (oldest first), exactly (counts of several instances
	// add up); a share deleted meanwhile gets nothing written.
	AddOpenings(tx storage.Tx, id uint64, n int64, entries []Activity) error
	// List returns one page of the shares that match q, in q's order with
	// ties by id in the same direction, and the number of all matches.
	List(ctx context.Context, tx storage.Tx, q *ListSpec) ([]*Record, int, error)
	// Mark names the writing transaction tx of a flush, and Sees reports
	// whether the read transaction tx sees the writes of the transaction
	// marked mark (committed before tx began): the in-memory view batch is
	// then already in what tx reads.
	Mark(tx storage.Tx) (int64, error)
	Sees(tx storage.Tx, mark int64) (bool, error)
}

// ListSpec is a list call as a Backend serves it: equality filters ("" for
// none), the visibility rule when the filters alone do not imply it, the
// order and the page.
type ListSpec struct {
	IssueID, ProjectID, CreatedBy string
	// VisibleTo, when set, keeps only the shares it created or whose
	// project it administers.
	VisibleTo *access.Identity
	// Sort is a SortFields value; Desc the direction.
	Sort   string
	Desc   bool
	Limit  int
	Offset int
	// Pending are openings not yet flushed, by share id, added to the
	// stored count when sorting by opened_count.
	Pending map[uint64]int64
}
