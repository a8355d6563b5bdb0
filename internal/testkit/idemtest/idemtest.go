// Package idemtest holds the checks the API packages' Idempotency-Key
// tests share: a replay equals the first reply, and a burst of one key
// makes one resource.
package idemtest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/problem"
)

// WantReplay checks that replay is first replayed: the same 201, Location,
// Content-Type and body byte for byte, marked Idempotent-Replayed.
func WantReplay(t testing.TB, first, replay *httptest.ResponseRecorder) {
	t.Helper()
	if first.Code != http.StatusCreated || first.Header().Get(idempotency.ReplayedHeader) != "" {
		t.Fatalf("first: %d, replayed %q", first.Code, first.Header().Get(idempotency.ReplayedHeader))
	}
	if replay.Code != http.StatusCreated || replay.Header().Get(idempotency.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d, replayed %q; %s", replay.Code, replay.Header().Get(idempotency.ReplayedHeader), replay.Body)
	}
	for _, h := range []string{"Location", "Content-Type"} {
		if a, b := first.Header().Get(h), replay.Header().Get(h); a != b || a == "" {
			t.Errorf("%s: first %q, replay %q", h, a, b)
		}
	}
	if !bytes.Equal(first.Body.Bytes(), replay.Body.Bytes()) {
		t.Errorf("replay body differs:\nfirst  %s\nreplay %s", first.Body, replay.Body)
	}
}

// Burst sends n copies of one keyed create at once with send, and checks
// that exactly one created, every other 201 replays it, and the rest are
// 409 conflict problems (the key in flight). The caller counts what was
// stored.
func Burst(t testing.TB, n int, send func() *httptest.ResponseRecorder) {
	t.Helper()
	replies := make([]*httptest.ResponseRecorder, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range replies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			replies[i] = send()
		}()
	}
	close(start)
	wg.Wait()
	var fresh *httptest.ResponseRecorder
	counts := map[int]int{}
	for _, w := range replies {
		counts[w.Code]++
		switch {
		case w.Code == http.StatusCreated && w.Header().Get(idempotency.ReplayedHeader) == "":
			if fresh != nil {
				t.Fatal("two fresh creates")
			}
			fresh = w
		case w.Code == http.StatusConflict:
			var p problem.Details
			if w.Header().Get("Content-Type") != problem.ContentType || json.Unmarshal(w.Body.Bytes(), &p) != nil || p.Code != problem.CodeConflict {
				t.Fatalf("409 %s: %s", w.Header().Get("Content-Type"), w.Body)
			}
		case w.Code != http.StatusCreated:
			t.Fatalf("reply %d %s", w.Code, w.Body)
		}
	}
	t.Logf("%d at once: %v", n, counts)
	if fresh == nil {
		t.Fatal("no create")
	}
	for _, w := range replies {
		if w.Code == http.StatusCreated && w != fresh {
			WantReplay(t, fresh, w)
		}
	}
}
