package pgdb

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// TestClaimEmpty: a schema holds no data until a table has a row; the
// error names every table with rows and how many; the migrations'
// bookkeeping and the master key check are no data.
func TestClaimEmpty(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	if err := db.CheckMasterKey(ctx, make([]byte, 32)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, insert, want string
	}{
		{"fresh", "", ""},
		{"one template", "INSERT INTO templates (id, record, digest) VALUES ('T1', '\\x7b7d', '\\x00')", "templates (1 row)"},
		{"and templates", "INSERT INTO templates (id, record, digest) SELECT 'T' || i, '\\x7b7d', '\\x00' FROM generate_series(2, 3) i", "templates (3 rows)"},
		{"and many counts", "INSERT INTO share_counts (kind, a, n) SELECT 'c', i::text, 1 FROM generate_series(1, 1500) i", "share_counts (more than 1000 rows), templates (3 rows)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.insert != "" {
				if _, err := db.Pool.Exec(ctx, tc.insert); err != nil {
					t.Fatal(err)
				}
			}
			err := db.Update(ctx, func(tx storage.Tx) error { return db.ClaimEmpty(ctx, tx) })
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("empty schema refused: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrNotEmpty) || err.Error() != "schema "+db.Schema()+" is not empty: it holds "+tc.want):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestCopierAndSequence: rows go in by the batch, byte values are copied
// when added (the caller may reuse its buffer), and a sequence advanced
// past copied ids continues after them but never goes back.
func TestCopierAndSequence(t *testing.T) {
	db := open(t, pgtest.Shared(t).Schema(t))
	ctx := context.Background()
	const n = copyBatchRows*2 + 7
	err := db.Update(ctx, func(tx storage.Tx) error {
		c := NewCopier(ctx, tx, "share_counts", "kind", "a", "b", "n")
		buf := []byte("x")
		for i := range n {
			buf[0] = byte('a' + i%26)
			if err := c.Add("c", string(rune('a'+i%26))+strings.Repeat("z", i/26), string(buf), int64(i)); err != nil {
				return err
			}
		}
		if got, err := c.Close(); err != nil || got != n {
			t.Fatalf("wrote %d rows, %v; want %d", got, err, n)
		}
		if err := c.Add("only", "two"); err == nil {
			t.Fatal("a row of two values for four columns was taken")
		}
		for _, last := range []uint64{0, 41, 7} {
			if err := AdvanceSequence(ctx, tx, "'share_id_seq'", last); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var rows, next int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM share_counts WHERE b = left(a, 1)").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != n {
		t.Errorf("%d rows hold their own value of b, want %d", rows, n)
	}
	if err := db.Pool.QueryRow(ctx, "SELECT nextval('share_id_seq')").Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next != 42 {
		t.Errorf("next id %d, want 42", next)
	}
}
