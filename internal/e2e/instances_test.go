package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/gatewayproc"
	"github.com/keygate/keygate/internal/mailtest"
	"github.com/keygate/keygate/internal/pgtest"
)

// cluster is several gateway processes on one PostgreSQL database, with
// one master key and one SMTP server, as an operator runs them behind a
// load balancer (spec storage.md, "Several instances on one database").
type cluster struct {
	pg    *pgtest.Server
	gws   []*gatewayproc.Gateway
	mails *mailtest.Server
}

// instancesSendTimeout is the gateways' send_timeout: a message taken by
// an instance killed mid-send is sent by another after twice this.
const instancesSendTimeout = 2 * time.Second

// startCluster starts n gateways at once on a server of the test's own
// (the outage test stops it), so that their migrations race as several
// instances starting together do.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	pg, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	keyFile := filepath.Join(t.TempDir(), "master.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{pg: pg, mails: mailtest.Start(t), gws: make([]*gatewayproc.Gateway, n)}
	webapi := fmt.Sprintf("storage postgres {\n\t\t\tdsn %q\n\t\t}\n\t\tmaster_key_file %s\n\t\tsend_timeout %s\n\t\tsmtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}",
		pg.DSN, keyFile, instancesSendTimeout, c.mails.Addr)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.gws[i], errs[i] = gatewayproc.Start(gatewayproc.Options{Bin: bin, Dir: t.TempDir(), WebAPI: webapi})
		}()
	}
	wg.Wait()
	for i, g := range c.gws {
		if g != nil {
			t.Cleanup(func() {
				if err := g.Stop(); err != nil {
					t.Errorf("instance %d: %v", i, err)
				}
			})
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
	return c
}

// usage is key id's stored count, read from the database.
func (c *cluster) usage(t *testing.T, id string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(ctx, "SELECT usage_count FROM keygate.keys WHERE id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// status is the status of a GET of path on g with token.
func status(t *testing.T, g *gatewayproc.Gateway, token, path string) int {
	t.Helper()
	r, err := crashDo("GET", g.Site+path, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.status
}

// within polls cond every 10 ms and fails unless it holds within limit,
// the promise of the spec under test; it reports how long it took.
func within(t *testing.T, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func TestSeveralInstances(t *testing.T) {
	c := startCluster(t, 3)
	if err := c.gws[0].AddTemplate("PAGE-1", "LEGAL", "NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	const missing = "/webapi/contracts/00000000-0000-4000-8000-000000000000"

	t.Run("a key change on one instance holds on every other within 1 s", func(t *testing.T) {
		k, err := c.gws[0].CreateKey("contracts", "roaming", "alice", []string{"get", "search"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range c.gws {
			took := within(t, time.Second, fmt.Sprintf("created key on instance %d", i), func() bool {
				return status(t, g, k.Token, missing) == http.StatusNotFound
			})
			t.Logf("created: instance %d after %s", i, took)
		}
		if err := c.gws[1].AdminJSON("PATCH", "/webapi/keys/"+k.ID, map[string]any{"privileges": []string{"get"}}, nil); err != nil {
			t.Fatal(err)
		}
		for i, g := range c.gws {
			took := within(t, time.Second, fmt.Sprintf("restricted key on instance %d", i), func() bool {
				return status(t, g, k.Token, "/webapi/contracts?substring=x") == http.StatusForbidden
			})
			t.Logf("restricted: instance %d after %s", i, took)
		}
		if err := c.gws[2].AdminJSON("DELETE", "/webapi/keys/"+k.ID, nil, nil); err != nil {
			t.Fatal(err)
		}
		for i, g := range c.gws {
			took := within(t, time.Second, fmt.Sprintf("deleted key on instance %d", i), func() bool {
				return status(t, g, k.Token, missing) == http.StatusUnauthorized
			})
			t.Logf("deleted: instance %d after %s", i, took)
		}
	})

	t.Run("uses spread over the instances count exactly", func(t *testing.T) {
		k, err := c.gws[0].CreateKey("contracts", "counted", "alice", []string{"get"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range c.gws {
			within(t, time.Second, "key known", func() bool { return status(t, g, k.Token, missing) == http.StatusNotFound })
		}
		// The polls above were uses too; count from what is stored now.
		eventually(t, 10*time.Second, "the polls' uses flushed", func() bool { return c.usage(t, k.ID) > 0 })
		time.Sleep(2 * time.Second) // every instance's flush interval has passed
		before := c.usage(t, k.ID)
		for i := range 60 {
			if s := status(t, c.gws[i%3], k.Token, missing); s != http.StatusNotFound {
				t.Fatalf("use %d: %d", i, s)
			}
		}
		eventually(t, 10*time.Second, "60 uses stored", func() bool { return c.usage(t, k.ID) >= before+60 })
		time.Sleep(2 * time.Second)
		if n := c.usage(t, k.ID); n != before+60 {
			t.Fatalf("stored count %d, want %d", n, before+60)
		}
	})
}

