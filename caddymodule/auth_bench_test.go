package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/keygate/keygate/caddymodule/auditlog"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/keystore"
)

// BenchmarkAuthServeHTTP measures the key check alone (allocations and
// time per authorized request), without network or Caddy routing.
func BenchmarkAuthServeHTTP(b *testing.B) {
	dir := b.TempDir()
	s, err := openState(BoltStorage{}, dir, filepath.Join(dir, "master.key"), 0, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destruct()
	in := &keystore.KeyInput{Service: patch.Some("contracts"), Name: patch.Some("b"), Owner: patch.Some("o"), Privileges: patch.Some([]string{"get"})}
	k, err := s.keys.Create(in)
	if err != nil {
		b.Fatal(err)
	}
	h := &Auth{Service: "contracts", table: tables["contracts"], keys: s.keys, audit: auditlog.New(zap.NewNop())}
	h.metrics = map[string]*opMetrics{"none": newOpMetrics("contracts", "none")}
	for _, op := range h.table.Operations {
		h.metrics[op.Name] = newOpMetrics("contracts", op.Name)
	}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(200); return nil })
	req := httptest.NewRequest("GET", "/webapi/contracts/abc", nil)
	vars := map[string]any{caddyhttp.ClientIPVarKey: "127.0.0.1"}
	// withReplacer gives the request a new replacer: each request adds
	// its placeholders to its own, and one kept for all would grow
	// without end, timing its appends instead of the check.
	var r *http.Request
	withReplacer := func() {
		ctx := context.WithValue(req.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer())
		r = req.WithContext(context.WithValue(ctx, caddyhttp.VarsCtxKey, vars))
	}
	withReplacer()
	w := httptest.NewRecorder()
	auth := []string{"Bearer " + k.Token}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Header["Authorization"] = auth
		h.ServeHTTP(w, r, next)
		if i%1024 == 0 {
			h.audit.Flush()
			withReplacer()
		}
	}
}
