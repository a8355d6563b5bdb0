package caddymodule_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestImportKeys imports keys through the admin API on each backend: from
// JSON Lines and from a Kong decK dump, their tokens working through the
// gateway at once; a dry run and a refused import store nothing; one
// audit entry per import, and no token in any log or reply.
func TestImportKeys(t *testing.T) { eachBackend(t, testImportKeys) }

func testImportKeys(t *testing.T, b backend) {
	g := startGateway(t, b, defaultSite)
	count := func() int {
		var ks []json.RawMessage
		do(t, http.MethodGet, adminURL+"/webapi/keys", nil).json(t, &ks)
		return len(ks)
	}
	post := func(body map[string]any) response {
		t.Helper()
		return do(t, http.MethodPost, adminURL+"/webapi/keys/import", body)
	}
	const (
		foreign = "Kong-Legacy-Token-0123456789"
		other   = "another-gateway-token-abcdef"
	)
	jsonl := `{"service":"share","name":"from kong","owner":"acme","privileges":["get","list"],"token":"` + foreign + `"}
{"name":"contracts too","owner":"acme","privileges":["get"],"token":"` + other + `"}
{"service":"share","name":"fresh","owner":"acme","privileges":["get"]}`

	// A dry run: the report, nothing stored.
	r := post(map[string]any{"format": "jsonl", "data": jsonl, "service": "contracts", "dryRun": true})
	var report struct {
		Imported, KeptTokens int
		DryRun               bool
		Keys                 []struct{ Line int }
	}
	r.json(t, &report)
	if r.status != http.StatusOK || report.Imported != 3 || report.KeptTokens != 2 || !report.DryRun || count() != 0 {
		t.Fatalf("dry run: %d %s, %d keys", r.status, r.body, count())
	}
	// The import, and the tokens work through the gateway.
	r = post(map[string]any{"format": "jsonl", "data": jsonl, "service": "contracts"})
	r.json(t, &report)
	if r.status != http.StatusOK || report.Imported != 3 || report.DryRun || len(report.Keys) != 3 || report.Keys[2].Line != 3 || count() != 3 {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	if got := do(t, http.MethodGet, siteURL+"/webapi/share?projectId=10000", nil, bearer(foreign)...); got.status != http.StatusOK {
		t.Errorf("the imported share token: %d %s", got.status, got.body)
	}
	if got := do(t, http.MethodGet, siteURL+"/webapi/contracts/01a2139b-46b7-72cb-bd43-7aba811f6931", nil, bearer(other)...); got.status != http.StatusNotFound {
		t.Errorf("the imported contracts token: %d %s", got.status, got.body)
	}

	// A Kong dump with its privileges map.
	dump, err := os.ReadFile("../keystore/testdata/kong.yaml")
	if err != nil {
		t.Fatal(err)
	}
	grants := map[string]any{
		"readers":       map[string]any{"service": "contracts", "privileges": []string{"get", "search"}},
		"writers":       map[string]any{"service": "contracts", "privileges": []string{"create"}},
		"share-readers": map[string]any{"service": "share", "privileges": []string{"get", "list"}},
	}
	if r := post(map[string]any{"format": "kong", "data": string(dump)}); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "privilegesMap") {
		t.Errorf("kong without a map: %d %s", r.status, r.body)
	}
	r = post(map[string]any{"format": "kong", "data": string(dump), "privilegesMap": grants})
	if r.status != http.StatusOK || count() != 6 {
		t.Fatalf("kong import: %d %s, %d keys", r.status, r.body, count())
	}
	if got := do(t, http.MethodGet, siteURL+"/webapi/contracts?page-size=1", nil, bearer("billing-live-key-0123456789abcdef")...); got.status != http.StatusOK ||
		got.header.Get("RateLimit-Policy") == "" {
		t.Errorf("a Kong token, with its rate limits: %d %v %s", got.status, got.header, got.body)
	}

	// Refused: every bad line named, nothing stored.
	r = post(map[string]any{"format": "jsonl", "data": `{"service":"share","name":"again","owner":"acme","privileges":["get"],"token":"` + foreign + `"}` + "\n" + `{"service":"share"}`})
	if r.status != http.StatusBadRequest || !strings.Contains(string(r.body), `"lines[1].token"`) || !strings.Contains(string(r.body), `"lines[2].name"`) || count() != 6 {
		t.Errorf("a bad import: %d %s, %d keys", r.status, r.body, count())
	}
	if r := post(map[string]any{"format": "csv", "data": "x"}); r.status != http.StatusBadRequest {
		t.Errorf("an unknown format: %d", r.status)
	}

	// A client that puts its token into a path: the audit log leaves it
	// out, as it does keygate's own.
	do(t, http.MethodGet, siteURL+"/webapi/share/"+foreign, nil, bearer(foreign)...)

	// One audit entry per import that stored keys, and no token anywhere.
	logs := g.readLogs(t, `"format":"kong"`)
	if strings.Count(logs, `"msg":"keys imported"`) != 2 || !strings.Contains(logs, `"imported":3,"format":"jsonl"`) || !strings.Contains(logs, `"imported":3,"format":"kong"`) {
		t.Errorf("audit entries of the imports:\n%s", logs)
	}
	for _, secret := range []string{foreign, other, "billing-live-key", "reporting-0000"} {
		if strings.Contains(logs, secret) || strings.Contains(string(r.body), secret) {
			t.Errorf("a log or reply holds %s", secret)
		}
	}
}
