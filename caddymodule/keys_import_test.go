package caddymodule_test

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/testwait"
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
	dump, err := os.ReadFile("../keystore/keyimport/testdata/kong.yaml")
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
	// billing is one consumer holding its two credentials' keys.
	var kong struct {
		Keys []struct {
			Name       string
			ConsumerID *string
		}
		Consumers []struct {
			ID, Name   string
			ExternalID *string
			Keys       int
		}
	}
	r.json(t, &kong)
	if len(kong.Consumers) != 2 || kong.Consumers[0].Name != "billing" || kong.Consumers[0].ExternalID == nil ||
		*kong.Consumers[0].ExternalID != "cust-42" || kong.Consumers[0].Keys != 2 {
		t.Fatalf("kong import's consumers: %s", r.body)
	}
	for _, k := range kong.Keys {
		if strings.HasPrefix(k.Name, "billing") && (k.ConsumerID == nil || *k.ConsumerID != kong.Consumers[0].ID) {
			t.Errorf("key %s is not billing's: %s", k.Name, r.body)
		}
	}
	got := do(t, http.MethodGet, siteURL+"/webapi/contracts?page-size=1", nil, bearer("billing-live-key-0123456789abcdef")...)
	if got.status != http.StatusOK || !strings.Contains(got.header.Get("RateLimit-Policy"), `"consumer:second";q=5;w=1`) {
		t.Errorf("a Kong token, with its consumer's rate limits: %d %v %s", got.status, got.header, got.body)
	}
	// Its two tokens alternated share the consumer's 5 a second, as on
	// Kong: not 5 each. The burst starts a whole window after the request
	// above, so that one no longer weighs; only a burst that ends in the
	// window it began in is judged (on a slow machine it may not).
	testwait.NextWindow(time.Second, 0)
	testwait.NextWindow(time.Second, 10*time.Millisecond)
	start, through := time.Now(), 0
	for i := range 14 {
		token := []string{"billing-live-key-0123456789abcdef", "billing-backup-key-fedcba9876543210"}[i%2]
		if do(t, http.MethodGet, siteURL+"/webapi/contracts?page-size=1", nil, bearer(token)...).status == http.StatusOK {
			through++
		}
	}
	switch end := time.Now(); {
	case !end.Truncate(time.Second).Equal(start.Truncate(time.Second)):
		t.Logf("the burst outlasted its window (%v, a loaded machine): the consumer's limit is not checked", end.Sub(start))
	case through != 5:
		t.Errorf("%d of 14 let through in %v alternating billing's two tokens, want the consumer's 5", through, end.Sub(start))
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

// testGroups is the privileges map of the Kong tests: writers grants a
// privilege contracts keys do not have, a problem of the map.
var testGroups = map[string]any{
	"readers":       map[string]any{"service": "contracts", "privileges": []string{"get", "search"}},
	"writers":       map[string]any{"service": "contracts", "privileges": []string{"fly"}},
	"share-readers": map[string]any{"service": "share", "privileges": []string{"get", "list"}},
}

// TestImportKongReplies: what the admin API answers a Kong import:
// every problem of every kind in one reply, a YAML syntax error at its
// line and column, a decK dump sent as JSON Lines named as such in one
// problem, a group an acl plugin denies, a top-level plugin naming no
// consumer or two (whose custom_id is twice in the dump); and the
// consumers without credentials named in the summary, dry run included.
// Nothing is stored by a refused import.
func TestImportKongReplies(t *testing.T) {
	startGateway(t, bolt, defaultSite)
	post := func(body map[string]any) response {
		t.Helper()
		return do(t, http.MethodPost, adminURL+"/webapi/keys/import", body)
	}
	read := func(name string) string {
		raw, err := os.ReadFile("../keystore/keyimport/testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	// A token stored before, which the file's gamma has too.
	if r := post(map[string]any{"data": `{"service":"share","name":"there","owner":"o","privileges":["get"],"token":"stored-before-this-import-0123"}`}); r.status != http.StatusOK {
		t.Fatalf("the first import: %d %s", r.status, r.body)
	}
	readersOnly := map[string]any{"readers": testGroups["readers"], "share-readers": testGroups["share-readers"]}
	tests := []struct {
		name string
		body map[string]any
		// fields are the problems' fields, in order, of a 400; each of
		// messages is in one of the problems' messages.
		fields, messages []string
		// skipped are the consumers the summary of a 200 names.
		skipped []string
	}{
		{
			name: "every problem in one reply",
			body: map[string]any{"format": "kong", "data": read("kong-every-problem.yaml"), "privilegesMap": testGroups},
			fields: []string{"privilegesMap.writers.privileges[0]", "lines[6].plugins", "lines[8].key",
				"lines[14].acls", "lines[14].rateLimits[0].limit", "lines[24].key", "lines[25].key"},
			messages: []string{"group writers", "request-transformer", "nobody-maps-this", "the same token as line 16", "exists already"},
		},
		{
			name:     "a YAML syntax error",
			body:     map[string]any{"format": "kong", "data": "consumers:\n- username: a\n  keyauth_credentials:\n  - key: a-key-0123456789abcdef\n   acls: x\n", "privilegesMap": readersOnly},
			fields:   []string{"lines[5]"},
			messages: []string{"line 5, column 4"},
		},
		{
			name:     "a decK dump sent as JSON Lines",
			body:     map[string]any{"format": "jsonl", "data": read("kong.yaml")},
			fields:   []string{"format"},
			messages: []string{"this looks like a decK dump", "--format kong"},
		},
		{
			name: "a group an acl plugin denies",
			body: map[string]any{"format": "kong", "privilegesMap": readersOnly, "data": `consumers:
- username: banned
  keyauth_credentials:
  - key: banned-key-0123456789abcdef
  acls:
  - group: readers
  - group: blocked
plugins:
- name: acl
  config: {deny: [blocked]}
`},
			fields:   []string{"lines[2].acls"},
			messages: []string{"blocked"},
		},
		{
			name: "a plugin naming two consumers, and one naming none",
			body: map[string]any{"format": "kong", "privilegesMap": readersOnly, "data": `consumers:
- username: one
  custom_id: crm
  keyauth_credentials:
  - key: one-key-0123456789abcdef
  acls:
  - group: readers
- username: two
  custom_id: crm
  keyauth_credentials:
  - key: two-key-0123456789abcdef
  acls:
  - group: readers
plugins:
- name: rate-limiting
  consumer: crm
  config: {minute: 5}
- name: rate-limiting
  consumer: nobody
  config: {minute: 5}
`},
			// Kong keeps a custom_id unique; a dump with one twice gives
			// two consumers one externalId, a problem too.
			fields:   []string{"lines[8].externalId", "lines[15].consumer", "lines[18].consumer"},
			messages: []string{"crm", "nobody", "the same externalId as the consumer at line 2"},
		},
		{
			name:    "a consumer without credentials, dry run",
			body:    map[string]any{"format": "kong", "data": read("kong.yaml"), "privilegesMap": readersOnly, "dryRun": true},
			skipped: []string{"no-key"},
		},
		{
			name:    "a consumer without credentials",
			body:    map[string]any{"format": "kong", "data": read("kong.yaml"), "privilegesMap": map[string]any{"readers": testGroups["readers"], "writers": testGroups["readers"], "share-readers": testGroups["share-readers"]}},
			skipped: []string{"no-key"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := keyCount(t)
			r := post(tt.body)
			if tt.fields == nil {
				var report struct {
					Imported int
					Skipped  []struct {
						Line     int
						Consumer string
						Reason   string
					}
				}
				r.json(t, &report)
				var names []string
				for _, s := range report.Skipped {
					if s.Line < 1 || s.Reason == "" {
						t.Errorf("a skipped consumer without its line or reason: %s", r.body)
					}
					names = append(names, s.Consumer)
				}
				if r.status != http.StatusOK || !slices.Equal(names, tt.skipped) {
					t.Errorf("%d %s, want skipped %v", r.status, r.body, tt.skipped)
				}
				return
			}
			if r.status != http.StatusBadRequest {
				t.Fatalf("%d %s, want 400", r.status, r.body)
			}
			p := r.problem(t)
			var fields []string
			var all strings.Builder
			for _, e := range p.Errors {
				fields = append(fields, e.Field)
				all.WriteString(e.Message + "\n")
			}
			if !slices.Equal(fields, tt.fields) {
				t.Errorf("problems at %v, want %v\n%s", fields, tt.fields, r.body)
			}
			for _, m := range tt.messages {
				if !strings.Contains(all.String(), m) {
					t.Errorf("no problem says %q:\n%s", m, all.String())
				}
			}
			if keyCount(t) != before {
				t.Error("a refused import stored keys")
			}
			for _, secret := range []string{"twice-in-this-file", "stored-before-this", "billing-live-key", "-key-0123456789abcdef"} {
				if strings.Contains(string(r.body), secret) {
					t.Errorf("the reply holds %s", secret)
				}
			}
		})
	}
}

// TestImportKongConsumerReference: a top-level plugin naming "beta" goes
// to the consumer named beta, not to alpha whose custom_id is beta and
// which comes first: beta's token is refused from an address the
// plugin does not allow, alpha's is served.
func TestImportKongConsumerReference(t *testing.T) {
	startGateway(t, bolt, defaultSite)
	dump := `consumers:
- username: alpha
  custom_id: beta
  keyauth_credentials:
  - key: alpha-token-0123456789abcdef
  acls:
  - group: share-readers
- username: beta
  keyauth_credentials:
  - key: beta-token-0123456789abcdef
  acls:
  - group: share-readers
plugins:
- name: ip-restriction
  consumer: beta
  config: {allow: [192.0.2.7]}
`
	r := do(t, http.MethodPost, adminURL+"/webapi/keys/import", map[string]any{"format": "kong", "data": dump,
		"privilegesMap": map[string]any{"share-readers": testGroups["share-readers"]}})
	if r.status != http.StatusOK {
		t.Fatalf("import: %d %s", r.status, r.body)
	}
	for _, tt := range []struct {
		token string
		want  int
	}{
		{"alpha-token-0123456789abcdef", http.StatusOK},
		{"beta-token-0123456789abcdef", http.StatusForbidden},
	} {
		if got := do(t, http.MethodGet, siteURL+"/webapi/share?projectId=10000", nil, bearer(tt.token)...); got.status != tt.want {
			t.Errorf("%s from 127.0.0.1: %d %s, want %d", tt.token[:5], got.status, got.body, tt.want)
		}
	}
}

// keyCount is how many keys the admin API lists.
func keyCount(t *testing.T) int {
	var ks []json.RawMessage
	do(t, http.MethodGet, adminURL+"/webapi/keys", nil).json(t, &ks)
	return len(ks)
}
