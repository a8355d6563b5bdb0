package caddymodule_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

// The Idempotency-Key rows of clients.md as a client of the gateway
// sees them, on both backends; upstreams/contracts, upstreams/share and
// internal/idempotency test their edges.
func TestIdempotencyKey(t *testing.T) { eachBackend(t, testIdempotencyKey) }

// idmReplay fails unless replay is first sent again, marked.
func idmReplay(t *testing.T, first, replay response) {
	t.Helper()
	if first.status != http.StatusCreated || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d, Idempotent-Replayed %q", first.status, first.header.Get("Idempotent-Replayed"))
	}
	if replay.status != first.status || replay.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d, Idempotent-Replayed %q; %s", replay.status, replay.header.Get("Idempotent-Replayed"), replay.body)
	}
	for _, h := range []string{"Location", "Content-Type", "Cache-Control"} {
		if a, b := first.header.Get(h), replay.header.Get(h); a != b || a == "" {
			t.Errorf("%s: first %q, replay %q", h, a, b)
		}
	}
	if !bytes.Equal(first.body, replay.body) {
		t.Errorf("replay body differs:\nfirst  %s\nreplay %s", first.body, replay.body)
	}
}

func idmContract(name, signer, watcher string) map[string]any {
	return map[string]any{"templateId": "TPL-1", "name": name,
		"signers":  []map[string]any{{"fullName": "Sia Signer", "accessKind": "email", "email": signer}},
		"watchers": []map[string]any{{"name": "Wes Watcher", "email": watcher, "notificationKinds": "created"}}}
}

func testIdempotencyKey(t *testing.T, b backend) {
	g := ctrSetup(t, b)
	alice := ctrKey(t, "alice", "create", "search", "get")
	bob := ctrKey(t, "bob", "create", "search")
	aliceShares := shrKey(t, "alice", []string{"*"}, "create", "list")
	key := func(token, k string) []string { return append(bearer(token), "Idempotency-Key", k) }
	// alice's contracts (search sees every owner's).
	total := func(token string) int {
		p, _ := ctrSearch(t, token, "creator-id=alice&page-size=1")
		return p.TotalCount
	}
	mails := func(to string) int { return len(withSubject(emlMails(t, g.dir), to, "")) }

	body := idmContract("Lease 1", "sia@example.com", "wes@example.com")
	first := do(t, "POST", siteURL+ctrURL, body, key(alice, "lease-1")...)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	testwait.For(t, testwait.Generous, "the invitation and the watcher's notice", func() bool {
		return mails("sia@example.com") == 1 && mails("wes@example.com") == 1
	})

	t.Run("same key, same body: the stored reply, nothing created, no mail", func(t *testing.T) {
		for range 3 {
			idmReplay(t, first, do(t, "POST", siteURL+ctrURL, body, key(alice, "lease-1")...))
		}
		if n := total(alice); n != 1 {
			t.Fatalf("%d contracts, want 1", n)
		}
	})

	t.Run("same key, another body: 422 idempotency_key_reused, nothing created", func(t *testing.T) {
		r := do(t, "POST", siteURL+ctrURL, idmContract("Lease 2", "sia@example.com", "wes@example.com"), key(alice, "lease-1")...)
		kgWantProblem(t, r, http.StatusUnprocessableEntity, "idempotency_key_reused")
		if n := total(alice); n != 1 {
			t.Fatalf("%d contracts, want 1", n)
		}
	})

	t.Run("a key over 255 characters or not printable: 400, nothing created", func(t *testing.T) {
		for name, k := range map[string]string{
			"256 characters": strings.Repeat("k", 256),
			"a tab inside":   "lease\t9",
			"not ASCII":      "bestellung-ü",
			"empty":          "",
		} {
			r := do(t, "POST", siteURL+ctrURL, body, key(alice, k)...)
			p := kgWantProblem(t, r, http.StatusBadRequest, "invalid_request")
			if len(p.Errors) != 1 || p.Errors[0].Field != "Idempotency-Key" {
				t.Errorf("%s: errors %+v", name, p.Errors)
			}
		}
		// Control characters other than a tab never reach the handler:
		// Go's HTTP server refuses the request line by line, with a 400
		// of its own. Sent raw, as no Go client would send it.
		conn, err := net.Dial("tcp", strings.TrimPrefix(siteURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		raw := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer %s\r\nIdempotency-Key: lease\x01\r\n"+
			"Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}", ctrURL, alice)
		if _, err := conn.Write([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("a key with \\x01: %d, want 400", resp.StatusCode)
		}
		if n := total(alice); n != 1 {
			t.Fatalf("%d contracts, want 1", n)
		}
	})

	t.Run("the same key of another owner, or on the other path, is another key", func(t *testing.T) {
		r := do(t, "POST", siteURL+ctrURL, body, key(bob, "lease-1")...)
		if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "" || bytes.Equal(r.body, first.body) {
			t.Fatalf("bob: %d %s", r.status, r.body)
		}
		s := do(t, "POST", siteURL+shrURL, map[string]any{"type": "ISSUE", "issueId": "10001"}, key(aliceShares, "lease-1")...)
		if s.status != http.StatusCreated || s.header.Get("Idempotent-Replayed") != "" {
			t.Fatalf("alice's share with the key of her contract: %d %s", s.status, s.body)
		}
		idmReplay(t, s, do(t, "POST", siteURL+shrURL, map[string]any{"type": "ISSUE", "issueId": "10001"}, key(aliceShares, "lease-1")...))
		kgWantProblem(t, do(t, "POST", siteURL+shrURL, map[string]any{"type": "ISSUE", "issueId": "10002"}, key(aliceShares, "lease-1")...),
			http.StatusUnprocessableEntity, "idempotency_key_reused")
		list := do(t, "GET", siteURL+shrURL, nil, bearer(aliceShares)...)
		if list.header.Get("X-Total-Count") != "1" {
			t.Fatalf("%s shares, want 1", list.header.Get("X-Total-Count"))
		}
	})

	t.Run("50 at once with one key: one contract, its mail once", func(t *testing.T) {
		burst := idmContract("Burst", "burst@example.com", "burst-watch@example.com")
		replies := make([]response, 50)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range replies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				replies[i] = do(t, "POST", siteURL+ctrURL, burst, key(alice, "burst")...)
			}()
		}
		close(start)
		wg.Wait()
		var fresh *response
		counts := map[string]int{}
		for i, r := range replies {
			switch {
			case r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") == "":
				counts["created"]++
				fresh = &replies[i]
			case r.status == http.StatusCreated:
				counts["replayed"]++
			case r.status == http.StatusConflict:
				counts["conflict"]++
				kgWantProblem(t, r, http.StatusConflict, "conflict")
			default:
				t.Fatalf("reply %d %s", r.status, r.body)
			}
		}
		t.Logf("50 at once: %v", counts)
		if counts["created"] != 1 {
			t.Fatalf("%d fresh creates, want 1 (%v)", counts["created"], counts)
		}
		for _, r := range replies {
			if r.status == http.StatusCreated && r.header.Get("Idempotent-Replayed") != "" {
				idmReplay(t, *fresh, r)
			}
		}
		if n := total(alice); n != 2 {
			t.Fatalf("%d contracts of alice, want 2", n)
		}
	})

	t.Run("no mail twice", func(t *testing.T) {
		// A create without a key after everything above: once its mail is
		// written, what was queued before it is too.
		if r := do(t, "POST", siteURL+ctrURL, idmContract("Last", "last@example.com", "last-watch@example.com"), bearer(alice)...); r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
		testwait.For(t, testwait.Generous, "the last create's mail", func() bool {
			return mails("last@example.com") == 1 && mails("last-watch@example.com") == 1
		})
		// sia and wes have alice's contract and bob's, of the same body.
		for to, want := range map[string]int{"sia@example.com": 2, "wes@example.com": 2, "burst@example.com": 1, "burst-watch@example.com": 1} {
			if n := mails(to); n != want {
				t.Errorf("%d mails to %s, want %d", n, to, want)
			}
		}
		if n := len(emlMails(t, g.dir)); n != 8 {
			t.Errorf("%d mails written, want 8 (two per contract: alice's 3 and bob's 1)", n)
		}
	})
}
