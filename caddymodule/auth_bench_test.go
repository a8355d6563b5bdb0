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
	h := &Auth{Service: "contracts", table: tables["contracts"], keys: s.keys, audit: newAuditLog(zap.NewNop())}
	h.metrics = map[string]*opMetrics{"none": newOpMetrics("contracts", "none")}
	for _, op := range h.table.Operations {
		h.metrics[op.Name] = newOpMetrics("contracts", op.Name)
	}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error { w.WriteHeader(200); return nil })
	r := httptest.NewRequest("GET", "/webapi/contracts/abc", nil)
	repl := caddy.NewReplacer()
	ctx := context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl)
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, map[string]any{caddyhttp.ClientIPVarKey: "127.0.0.1"})
	r = r.WithContext(ctx)
	w := httptest.NewRecorder()
	auth := []string{"Bearer " + k.Token}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Header["Authorization"] = auth
		h.ServeHTTP(w, r, next)
		if i%1024 == 0 {
			h.audit.flush()
		}
	}
}
