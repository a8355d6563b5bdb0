package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// keyedDo sends a JSON POST with an Idempotency-Key.
func keyedDo(target, token, key string, body any) (crashReply, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return crashReply{}, err
	}
	req, err := http.NewRequest("POST", target, bytes.NewReader(b))
	if err != nil {
		return crashReply{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := crashClient.Do(req)
	if err != nil {
		return crashReply{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return crashReply{status: resp.StatusCode, header: resp.Header, body: raw}, err
}

// burst sends n copies of one keyed create at once, spread over the
// instances, and checks the replies: exactly one fresh 201, the rest its
// replay or 409. It returns the fresh reply.
func burst(t *testing.T, gws []*gatewayproc.Gateway, n int, path, token, key string, body any) crashReply {
	t.Helper()
	replies := make([]crashReply, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i], errs[i] = keyedDo(gws[i%len(gws)].Site+path, token, key, body)
		}()
	}
	close(start)
	wg.Wait()
	var fresh *crashReply
	counts := map[string]int{}
	for i, r := range replies {
		switch {
		case errs[i] != nil:
			t.Fatal(errs[i])
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "":
			counts["created"]++
			fresh = &replies[i]
		case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "true":
			counts["replayed"]++
		case r.status == http.StatusConflict:
			counts["conflict"]++
		default:
			t.Fatalf("reply %d %s", r.status, r.body)
		}
	}
	t.Logf("%d at once over %d instances: %v", n, len(gws), counts)
	if counts["created"] != 1 {
		t.Fatalf("%d fresh creates, want exactly 1 (%v)", counts["created"], counts)
	}
	for _, r := range replies {
		if r.status == http.StatusCreated && (r.header.Get("Location") != fresh.header.Get("Location") || !bytes.Equal(r.body, fresh.body)) {
			t.Fatalf("a replay differs from the create:\n%s\n%s", r.body, fresh.body)
		}
	}
	// Afterwards every instance replays it.
	for i, g := range gws {
		r, err := keyedDo(g.Site+path, token, key, body)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(r.body, fresh.body) ||
			r.header.Get("Location") != fresh.header.Get("Location") {
			t.Fatalf("instance %d after the burst: %d %s", i, r.status, r.body)
		}
	}
	return *fresh
}

// TestIdempotencyAcrossInstances: duplicates of one keyed create sent to
// three gateways on one PostgreSQL database at once make one contract
// (one share), whose mail goes out once; a repeat with another body is
// refused on every instance.
func TestIdempotencyAcrossInstances(t *testing.T) {
	c := startCluster(t, 3)
	if err := c.gws[0].AddTemplate("PAGE-1", "LEGAL", "NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	key := clusterKey(t, c, "idempotent", "get", "create")

	t.Run("contracts", func(t *testing.T) {
		var want []string
		for round := range 3 {
			name := fmt.Sprintf("Once %d", round)
			watcher, signer := fmt.Sprintf("once-w%d@example.com", round), fmt.Sprintf("once-s%d@example.com", round)
			burst(t, c.gws, 30, "/webapi/contracts", key, fmt.Sprintf("once-%d", round), contractBody(name, watcher, signer))
			if n := c.query(t, "SELECT count(*) FROM keygate.contracts WHERE name = $1", name); n != 1 {
				t.Fatalf("%d contracts named %q, want 1", n, name)
			}
			want = append(want, fmt.Sprintf("%s Contract created: “%s”", watcher, name), fmt.Sprintf("%s Please sign “%s”", signer, name))
			for i, g := range c.gws {
				r, err := keyedDo(g.Site+"/webapi/contracts", key, fmt.Sprintf("once-%d", round), contractBody(name+"!", watcher, signer))
				if err != nil {
					t.Fatal(err)
				}
				if r.status != http.StatusUnprocessableEntity {
					t.Fatalf("instance %d, another body: %d %s", i, r.status, r.body)
				}
			}
		}
		c.expectMails(t, want, 0)
	})

	t.Run("shares", func(t *testing.T) {
		k, err := c.gws[0].CreateKey("share", "idempotent shares", "alice", []string{"get", "create"}, map[string]any{"adminProjects": []string{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range c.gws {
			testwait.For(t, testwait.Generous, fmt.Sprintf("share key on instance %d", i), func() bool {
				r, err := crashDo("GET", g.Site+"/webapi/share/00000000-0000-4000-8000-000000000000", k.Token, nil)
				return err == nil && r.status == http.StatusNotFound
			})
		}
		body := map[string]any{"type": "ISSUE", "issueId": "77001", "projectId": "10000", "password": "once only"}
		burst(t, c.gws, 30, "/webapi/share", k.Token, "share-once", body)
		if n := c.query(t, "SELECT count(*) FROM keygate.shares WHERE issue_id = '77001'"); n != 1 {
			t.Fatalf("%d shares, want 1", n)
		}
	})
}
