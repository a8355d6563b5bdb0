package share

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/testkit/storetest"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/testkit/eventstest"
)

// fuzzEnvs is newEnv for a fuzz function: a database on each backend an
// input runs on (storetest.FuzzBackends), each opened once for every
// input, since f.Fuzz's body must be fast.
func fuzzEnvs(f *testing.F) []*env {
	f.Helper()
	var out []*env
	for _, b := range storetest.FuzzBackends() {
		out = append(out, envOn(f, b.Open(f)))
	}
	return out
}

// eachEnv runs fn on each env, as subtests named after the backends; the
// env's helpers report to the subtest.
func eachEnv(t *testing.T, envs []*env, fn func(t *testing.T, e *env)) {
	for _, e := range envs {
		t.Run(e.db.Backend(), func(t *testing.T) {
			e.t = t
			fn(t, e)
		})
	}
}

// fuzzRequest builds a request without httptest.NewRequest's panics on
// a target that is not a URL: path and raw query are set as given.
func fuzzRequest(method, path, rawQuery, contentType string, body []byte, caller *access.Identity) *http.Request {
	r := httptest.NewRequest(method, "/", bytes.NewReader(body))
	r.URL.Path, r.URL.RawQuery = path, rawQuery
	r.RequestURI = path
	r.RemoteAddr = "198.51.100.7:40000"
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	if caller != nil {
		r = r.WithContext(access.WithIdentity(r.Context(), caller))
	}
	return r
}

// wantFuzzProblem fails unless w is a 4xx problem body with its code set.
func wantFuzzProblem(t *testing.T, w *httptest.ResponseRecorder) problem.Details {
	t.Helper()
	if w.Code < 400 || w.Code > 499 {
		t.Fatalf("status %d, want 4xx; body %s", w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
		t.Fatalf("status %d with Content-Type %q", w.Code, ct)
	}
	var d problem.Details
	if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || d.Code == "" || d.Status != w.Code {
		t.Fatalf("problem body %s: %v", w.Body, err)
	}
	return d
}

// readBack checks that a 200 or 201 share reply names a share that reads
// back as the same record, byte for byte, of the type that was sent.
func readBack(t *testing.T, e *env, w *httptest.ResponseRecorder, caller *access.Identity, body []byte) *Share {
	t.Helper()
	var sh Share
	if err := json.Unmarshal(w.Body.Bytes(), &sh); err != nil || sh.UUID == "" {
		t.Fatalf("share body %s: %v", w.Body, err)
	}
	var sent struct{ Type string }
	if err := json.Unmarshal(body, &sent); err != nil || sent.Type != sh.Type {
		t.Fatalf("sent %s, stored %s: %v", body, w.Body, err)
	}
	g := serve(e.api, fuzzRequest(http.MethodGet, Prefix+"/"+sh.UUID, "", "", nil, caller))
	if g.Code != http.StatusOK || g.Body.String() != w.Body.String() {
		t.Fatalf("stored %s, reads back as %d %s", w.Body, g.Code, g.Body)
	}
	return &sh
}

// FuzzCreate posts arbitrary bodies as a key that administers P1.
// Property: no panic; a 201 whose share reads back, or a 4xx problem
// body with the database unchanged.
func FuzzCreate(f *testing.F) {
	envs := fuzzEnvs(f)
	f.Add("application/json", []byte(`{"type":"ISSUE","issueId":"10001","projectId":"P1","password":"s3cret","expirationExpression":{"days":30}}`))
	f.Add("application/json", []byte(`{"type":"JQL","projectId":"P1","jql":"project = P1"}`))
	f.Add("text/plain", []byte(`{"type":"ISSUE","issueId":"1"}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		eachEnv(t, envs, func(t *testing.T, e *env) {
			before := storetest.Digest(t, e.db)
			w := serve(e.api, fuzzRequest(http.MethodPost, Prefix, "", contentType, body, bob))
			if w.Code == http.StatusCreated {
				sh := readBack(t, e, w, bob, body)
				if w.Header().Get("Location") != Prefix+"/"+sh.UUID {
					t.Fatalf("Location %q for %s", w.Header().Get("Location"), sh.UUID)
				}
				// Keep the database small so the fuzzer stays fast; what a
				// share stored goes with it.
				if d := serve(e.api, fuzzRequest(http.MethodDelete, Prefix+"/"+sh.UUID, "", "", nil, bob)); d.Code != http.StatusNoContent {
					t.Fatalf("delete: %d %s", d.Code, d.Body)
				}
				// The events stay, as an outbox keeps them: exactly the
				// two, then gone for the comparison.
				if got := strings.Join(eventstest.Types(e.events.Take(t)), " "); got != "share.created share.deleted" {
					t.Fatalf("events %s", got)
				}
				e.events.Reset(t)
				if storetest.Digest(t, e.db) != before {
					t.Fatalf("deleting the share of %s left data behind", body)
				}
				return
			}
			wantFuzzProblem(t, w)
			if storetest.Digest(t, e.db) != before {
				t.Fatalf("a %d changed the database", w.Code)
			}
		})
	})
}

// FuzzUpdate puts arbitrary bodies over one share of alice. Property: no
// panic; a 200 whose share reads back, or a 4xx problem body with the
// database unchanged.
func FuzzUpdate(f *testing.F) {
	envs := fuzzEnvs(f)
	shareIDs := map[*env]string{}
	for _, e := range envs {
		sh, err := e.store.Create(context.Background(), alice, &CreateRequest{Type: TypeJQL, ProjectID: str("P1"), JQL: str("project = P1")})
		if err != nil {
			f.Fatal(err)
		}
		shareIDs[e] = sh.UUID
	}
	f.Add("application/json", []byte(`{"type":"JQL","projectId":"P1","jql":"project = P1 ORDER BY key","password":"pw"}`))
	f.Add("application/json", []byte(`{"type":"ISSUE","issueId":"1","projectId":"P1"}`))
	f.Fuzz(func(t *testing.T, contentType string, body []byte) {
		eachEnv(t, envs, func(t *testing.T, e *env) {
			before := storetest.Digest(t, e.db)
			w := serve(e.api, fuzzRequest(http.MethodPut, Prefix+"/"+shareIDs[e], "", contentType, body, alice))
			if w.Code == http.StatusOK {
				if sh := readBack(t, e, w, alice, body); sh.UUID != shareIDs[e] {
					t.Fatalf("updated %s, replied with %s", shareIDs[e], sh.UUID)
				}
				return
			}
			wantFuzzProblem(t, w)
			if storetest.Digest(t, e.db) != before {
				t.Fatalf("a %d changed the database", w.Code)
			}
		})
	})
}

// FuzzList sends arbitrary query strings to the list over a few shares.
// Property: no panic; a 200 array no longer than the limit with an
// X-Total-Count at least its length, or a 4xx problem body; a query
// string that does not decode is a 400; nothing is stored.
func FuzzList(f *testing.F) {
	envs := fuzzEnvs(f)
	befores := map[*env][32]byte{}
	for _, e := range envs {
		for _, in := range []*CreateRequest{issueShare("10001", "P1"), issueShare("10002", "P2"),
			{Type: TypeJQL, ProjectID: str("P1"), JQL: str("x")}} {
			if _, err := e.store.Create(context.Background(), root, in); err != nil {
				f.Fatal(err)
			}
		}
		befores[e] = storetest.Digest(f, e.db)
	}
	f.Add("projectId=P1&sort=created_at&sortOrder=desc&limit=1000")
	f.Add("limit=1001&offset=-1")
	f.Fuzz(func(t *testing.T, query string) {
		eachEnv(t, envs, func(t *testing.T, e *env) {
			_, qerr := url.ParseQuery(query)
			for _, caller := range []*access.Identity{root, bob} {
				w := serve(e.api, fuzzRequest(http.MethodGet, Prefix, query, "", nil, caller))
				if storetest.Digest(t, e.db) != befores[e] {
					t.Fatalf("a list (%d) changed the database", w.Code)
				}
				if qerr != nil && w.Code != http.StatusBadRequest {
					t.Fatalf("query %q (%v) answered %d %s", query, qerr, w.Code, w.Body)
				}
				if w.Code != http.StatusOK {
					wantFuzzProblem(t, w)
					return
				}
				var list []json.RawMessage
				if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
					t.Fatalf("200 body %s: %v", w.Body, err)
				}
				var total int
				if _, err := fmt.Sscan(w.Header().Get("X-Total-Count"), &total); err != nil || total < len(list) || total > 3 {
					t.Fatalf("X-Total-Count %q for %d shares", w.Header().Get("X-Total-Count"), len(list))
				}
			}
		})
	})
}

// FuzzUnlock posts arbitrary unlock forms and JSON bodies to the public
// page of a share with a password and a list of e-mails. Property: no
// panic; 204 (JSON) or 303 (form) only for the right password and a listed
// e-mail; a refusal is a 4xx, a problem body when JSON was sent or asked
// for, and only a wrong password or e-mail (401) stores anything, its
// unlock-failed activity entry.
func FuzzUnlock(f *testing.F) {
	envs := fuzzEnvs(f)
	shares := map[*env]string{}
	for _, e := range envs {
		sh, err := e.store.Create(context.Background(), alice, &CreateRequest{Type: TypeIssue, IssueID: str("10001"), ProjectID: str("P1"),
			Password:            OptionalString{Set: true, Value: str("s3cret")},
			SelectedUsersConfig: &SelectedUsersConfig{Allowed: true, List: []SelectedUser{{Email: "Ann@Example.com"}}}})
		if err != nil {
			f.Fatal(err)
		}
		shares[e] = sh.UUID
	}
	f.Add("application/x-www-form-urlencoded", false, []byte("password=s3cret&email=ann%40example.com"))
	f.Add("application/json", false, []byte(`{"password":"s3cret","email":"ann@example.com"}`))
	f.Add("application/x-www-form-urlencoded", true, []byte("password=wrong&email=ann%40example.com"))
	var n uint32
	f.Fuzz(func(t *testing.T, contentType string, acceptJSON bool, body []byte) {
		// Each input comes from its own address, so the per-client limit
		// of wrong tries does not turn every later input into a 429.
		n++
		ip := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
		eachEnv(t, envs, func(t *testing.T, e *env) {
			r := fuzzRequest(http.MethodPost, "/s/"+shares[e]+"/unlock", "", contentType, body, nil)
			r.RemoteAddr = ip.String() + ":40000"
			if acceptJSON {
				r.Header.Set("Accept", "application/json")
			}
			// Page events wait in memory until a flush; flushing around the
			// request makes what it stored visible.
			flush(t, e)
			before := storetest.Digest(t, e.db)
			activity := e.activityEntries()
			w := serve(e.viewer, r)
			flush(t, e)
			switch {
			case w.Code == http.StatusNoContent || w.Code == http.StatusSeeOther:
				in := unlockFields(contentType, body)
				if in.Password != "s3cret" || !strings.EqualFold(strings.TrimSpace(in.Email), "ann@example.com") {
					t.Fatalf("%d for %q", w.Code, body)
				}
				return
			case w.Code == http.StatusUnauthorized:
				if got := e.activityEntries(); got != activity+1 {
					t.Fatalf("401 wrote %d activity entries", got-activity)
				}
			case w.Code < 400 || w.Code > 499:
				t.Fatalf("status %d; body %s", w.Code, w.Body)
			default:
				if storetest.Digest(t, e.db) != before {
					t.Fatalf("a %d changed the database", w.Code)
				}
			}
			if acceptJSON || problem.IsJSON(r.Header.Get("Content-Type")) {
				wantFuzzProblem(t, w)
			} else if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
				t.Fatalf("%d page with Content-Type %q", w.Code, ct)
			}
		})
	})
}

func flush(t *testing.T, e *env) {
	t.Helper()
	if err := e.store.Flush(); err != nil {
		t.Fatal(err)
	}
}

// unlockFields reads an unlock body as the viewer should have.
func unlockFields(contentType string, body []byte) unlockInput {
	var in unlockInput
	if problem.IsJSON(contentType) {
		_ = json.Unmarshal(body, &in)
		return in
	}
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	_ = r.ParseForm()
	in.Password, in.Email = r.PostForm.Get("password"), r.PostForm.Get("email")
	return in
}
