package pgtest

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestSchemaIsolated starts (or reaches) the shared server and checks
// that a test's schema exists while it runs and is gone afterwards.
func TestSchemaIsolated(t *testing.T) {
	srv := Shared(t)
	var name string
	t.Run("inner", func(t *testing.T) {
		name = srv.Schema(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Exec(ctx, "CREATE TABLE "+name+".t (x int); INSERT INTO "+name+".t VALUES (1)"); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Exec(ctx, "CREATE TABLE "+name+".t (x int)"); err == nil {
		t.Fatalf("schema %s still there after its test", name)
	}
}
