package caddymodule

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/keygate/keygate/caddymodule/auditlog"
	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// FuzzAuthServeHTTP sends the webapi_auth handler arbitrary Authorization
// headers (a newline separates repeated ones), client addresses, methods,
// paths and a Keygate-Key-Owner header of the client's. Property: no
// panic; a refusal is a 401, 403, 404 or 405 problem body with its status
// and code, the WWW-Authenticate or Allow header its code calls for, and
// never reaches the next handler; an authorized request reaches it with
// the key's own identity headers only and no Authorization header, and
// only for a live key's exact token.
func FuzzAuthServeHTTP(f *testing.F) {
	dir := f.TempDir()
	s, err := openState(BoltStorage{}, dir, filepath.Join(dir, "master.key"), 0, zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Destruct() })
	create := func(in *keystore.KeyInput) keystore.Key {
		k, err := s.keys.Create(in)
		if err != nil {
			f.Fatal(err)
		}
		return k
	}
	open := create(&keystore.KeyInput{Service: patch.Some("contracts"), Name: patch.Some("open"), Owner: patch.Some("alice"),
		Privileges: patch.Some([]string{"get", "search"})})
	fenced := create(&keystore.KeyInput{Service: patch.Some("contracts"), Name: patch.Some("fenced"), Owner: patch.Some("bob"),
		Privileges: patch.Some([]string{"create"}), AllowedIPs: patch.Some([]string{"10.0.0.0/8"})})
	other := create(&keystore.KeyInput{Service: patch.Some("share"), Name: patch.Some("share"), Owner: patch.Some("carol"),
		Privileges: patch.Some([]string{"list"})})
	owners := map[string]string{open.Token: "alice", fenced.Token: "bob"}

	h := &Auth{Service: "contracts", table: tables["contracts"], keys: s.keys, audit: auditlog.New(zap.NewNop())}
	h.metrics = map[string]*opMetrics{"none": newOpMetrics("contracts", "none")}
	for _, op := range h.table.Operations {
		h.metrics[op.Name] = newOpMetrics("contracts", op.Name)
	}

	for _, s := range []struct{ header, ip, method, path, owner string }{
		{"Bearer " + open.Token, "192.0.2.1", "GET", "/webapi/contracts", ""},
		{"bearer  " + open.Token + " ", "::ffff:192.0.2.1", "HEAD", "/webapi/contracts/x", "mallory"},
		{"Bearer " + open.Token, "192.0.2.1", "POST", "/webapi/contracts", ""},
		{"Bearer " + open.Token, "192.0.2.1", "PUT", "/webapi/contracts/x", ""},
		{"Bearer " + open.Token, "192.0.2.1", "GET", "/webapi/share", ""},
		{"Bearer " + fenced.Token, "10.9.8.7", "POST", "/webapi/contracts", ""},
		{"Bearer " + fenced.Token, "192.0.2.1", "POST", "/webapi/contracts", ""},
		{"Bearer " + fenced.Token, "", "POST", "/webapi/contracts", ""},
		{"Bearer " + other.Token, "192.0.2.1", "GET", "/webapi/contracts", ""},
		{"", "192.0.2.1", "GET", "/webapi/contracts", ""},
		{"Bearer " + open.Token + "\nBearer " + open.Token, "192.0.2.1", "GET", "/webapi/contracts", ""},
		{"Basic YTpi", "not an address", "GET", "/webapi/contracts", ""},
		{"Bearer kg_" + strings.Repeat("A", 43), "192.0.2.1", "DELETE", "/webapi/contracts/x", ""},
	} {
		f.Add(s.header, s.ip, s.method, s.path, s.owner)
	}
	var n int
	f.Fuzz(func(t *testing.T, header, ip, method, path, owner string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Method, r.URL.Path = method, path
		if header != "" {
			r.Header["Authorization"] = strings.Split(header, "\n")
		}
		if owner != "" {
			r.Header["Keygate-Key-Owner"] = []string{owner}
		}
		ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: ip})
		r = r.WithContext(ctx)
		values := r.Header.Values("Authorization")

		var reached *http.Request
		next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			reached = r
			w.WriteHeader(http.StatusNoContent)
			return nil
		})
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Fatalf("ServeHTTP: %v", err)
		}
		if n++; n%1024 == 0 {
			h.audit.Flush()
		}

		if reached != nil {
			if len(values) != 1 {
				t.Fatalf("authorized %d Authorization values", len(values))
			}
			_, token, _ := strings.Cut(values[0], " ")
			want, ok := owners[strings.TrimSpace(token)]
			if !ok {
				t.Fatalf("authorized %q", values[0])
			}
			if want == "bob" && !netip.MustParsePrefix("10.0.0.0/8").Contains(clientip.Parse(ip).Unmap()) {
				t.Fatalf("the fenced key authorized from %q", ip)
			}
			if reached.Header.Get("Authorization") != "" || reached.Header.Values("Keygate-Key-Owner")[0] != want ||
				len(reached.Header.Values("Keygate-Key-Owner")) != 1 || reached.Header.Get("Keygate-Operation") == "" {
				t.Fatalf("handed on with headers %v", reached.Header)
			}
			return
		}
		want := map[string]int{
			problem.CodeMissingKey: 401, problem.CodeInvalidKey: 401, problem.CodeKeyNotValid: 401,
			problem.CodeIPNotAllowed: 403, problem.CodeMissingPrivilege: 403,
			problem.CodeNotFound: 404, problem.CodeMethodNotAllowed: 405,
		}
		if ct := w.Header().Get("Content-Type"); ct != problem.ContentType {
			t.Fatalf("%d with Content-Type %q: %s", w.Code, ct, w.Body)
		}
		var d problem.Details
		if err := json.Unmarshal(w.Body.Bytes(), &d); err != nil || d.Status != w.Code || want[d.Code] != w.Code || d.Detail == "" {
			t.Fatalf("refusal %d %s: %v", w.Code, w.Body, err)
		}
		switch d.Code {
		case problem.CodeMissingKey, problem.CodeInvalidKey, problem.CodeKeyNotValid, problem.CodeMissingPrivilege:
			if !strings.HasPrefix(w.Header().Get("WWW-Authenticate"), "Bearer ") {
				t.Fatalf("%s without WWW-Authenticate", d.Code)
			}
		case problem.CodeMethodNotAllowed:
			if w.Header().Get("Allow") == "" {
				t.Fatal("405 without Allow")
			}
		}
	})
}
