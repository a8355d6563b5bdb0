package stores

import (
	"bytes"
	"context"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// open opens every store of List on db.
func open(t *testing.T, db storage.DB) *Stores {
	t.Helper()
	switch d := db.(type) {
	case *boltdb.DB:
		st, err := OpenBolt(d, "test")
		if err != nil {
			t.Fatal(err)
		}
		return st
	case *pgdb.DB:
		return OpenPostgres(d, "test")
	}
	t.Fatalf("no stores for %s", db.Backend())
	return nil
}

// TestOpenSetsEveryStore: walking List sets every backend of Stores on
// both backends, so a field added to Stores without its entry in List
// (or an entry that forgets one backend) fails here.
func TestOpenSetsEveryStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		v := reflect.ValueOf(open(t, db)).Elem()
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			if f.Kind() == reflect.Interface && f.IsNil() {
				t.Errorf("Stores.%s is not set by any entry of List", v.Type().Field(i).Name)
			}
		}
	})
}

// TestListNamesUnique: each store is listed once.
func TestListNamesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range List {
		if s.Name == "" || seen[s.Name] {
			t.Errorf("store name %q empty or listed twice", s.Name)
		}
		seen[s.Name] = true
		if s.Bolt == nil || s.Postgres == nil || s.Copy == nil {
			t.Errorf("store %s lacks a constructor or its copy", s.Name)
		}
	}
}

// pgdbTables are the tables of a migrated schema that belong to pgdb
// itself rather than to a store: the applied migrations, and meta (the
// master key's check value, and rows of stores such as the self-made
// seal certificate).
var pgdbTables = []string{"schema_migrations", "meta"}

// TestTablesMatchMigrations ties List to the numbered SQL migrations: the
// tables of a schema migrated to the newest migration are exactly those
// of pgdb and of the stores of List, each of one store. A store without
// its migration, a migration's table that no store claims, or a table
// claimed twice fails here.
func TestTablesMatchMigrations(t *testing.T) {
	db := storetest.OpenPostgres(t).(*pgdb.DB)
	ctx := context.Background()
	var have []string
	err := db.View(ctx, func(tx storage.Tx) error {
		rows, err := pgdb.Of(tx).Query(ctx,
			"SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE'", db.Schema())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				return err
			}
			have = append(have, name)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(have) == 0 {
		t.Fatalf("schema %s has no tables", db.Schema())
	}
	owner := map[string]string{}
	for _, name := range pgdbTables {
		owner[name] = "pgdb"
	}
	for _, s := range List {
		for _, name := range s.Tables {
			if o, ok := owner[name]; ok {
				t.Errorf("table %s is claimed by %s and %s", name, o, s.Name)
			}
			owner[name] = s.Name
		}
	}
	made := map[string]bool{}
	for _, name := range have {
		made[name] = true
		if owner[name] == "" {
			t.Errorf("migrations make table %s, which no store of List (Tables) claims", name)
		}
	}
	var missing []string
	for name, o := range owner {
		if !made[name] {
			missing = append(missing, name+" ("+o+")")
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("table %s is not made by any migration", m)
	}
}

// TestCopyEmpty walks every store's copy from an empty bbolt database
// into an empty schema: each reports what it copied, nothing.
func TestCopyEmpty(t *testing.T) {
	src := storetest.OpenBolt(t).(*boltdb.DB)
	if _, err := OpenBolt(src, "test"); err != nil {
		t.Fatal(err)
	}
	dst := storetest.OpenPostgres(t).(*pgdb.DB)
	sealer, err := seal.New(bytes.Repeat([]byte{1}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var copied []storage.Copied
	err = dst.Update(ctx, func(to storage.Tx) error {
		return src.View(ctx, func(from storage.Tx) error {
			copied, err = Copy(ctx, from, to, CopyEnv{Sealer: sealer, Now: time.Now()})
			return err
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(copied) < len(List) {
		t.Errorf("%d report lines for %d stores: %+v", len(copied), len(List), copied)
	}
	for _, c := range copied {
		if c.N != 0 {
			t.Errorf("copied %d %s from an empty database", c.N, c.Kind)
		}
	}
}
