package caddymodule_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/keystore"
)

// TestConsumersAndPlans: plans and consumers through the admin API; a
// consumer's limits bind all its keys over the gateway, with headers and
// refusals that name them consumer:NAME; a plan change holds its holders
// at once; bad input is a 4xx naming the field and changes nothing; the
// audit log names consumer and plan. On both backends.
func TestConsumersAndPlans(t *testing.T) { eachBackend(t, testConsumersAndPlans) }

func testConsumersAndPlans(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	create := func(path string, body any) (map[string]any, response) {
		t.Helper()
		r := do(t, http.MethodPost, adminURL+path, body)
		var v map[string]any
		if r.status == http.StatusCreated {
			r.json(t, &v)
			if loc := r.header.Get("Location"); loc != path+"/"+v["id"].(string) {
				t.Errorf("Location %q", loc)
			}
		}
		return v, r
	}
	plan, r := create("/webapi/plans", map[string]any{"name": "basic", "rateLimits": []map[string]any{{"name": "burst", "limit": 50, "windowSeconds": 60}}})
	if r.status != http.StatusCreated || plan["name"] != "basic" || plan["quota"] != nil {
		t.Fatalf("plan: %d %s", r.status, r.body)
	}
	consumer, r := create("/webapi/consumers", map[string]any{"name": "ACME", "externalId": "acme-1",
		"rateLimits": []map[string]any{{"name": "minute", "limit": 3, "windowSeconds": 60}}})
	if r.status != http.StatusCreated || consumer["externalId"] != "acme-1" || consumer["keyCount"] != 0.0 || consumer["planId"] != nil {
		t.Fatalf("consumer: %d %s", r.status, r.body)
	}
	cid, pid := consumer["id"].(string), plan["id"].(string)
	keyBody := map[string]any{"service": "contracts", "name": "k", "owner": "alice", "privileges": []string{"search"}, "consumerId": cid, "planId": pid}
	a, bk := createKey(t, keyBody), createKey(t, keyBody)
	if a.ConsumerID == nil || *a.ConsumerID != cid || a.PlanID == nil || *a.PlanID != pid {
		t.Fatalf("key %+v", a)
	}

	// Three a minute for the two keys together.
	const policy = `"burst";q=50;w=60, "consumer:minute";q=3;w=60`
	clearOfWindowEdge(time.Minute, 10*time.Second)
	through := 0
	for i := range 6 {
		tok := []string{a.Token, bk.Token}[i%2]
		r := do(t, http.MethodGet, siteURL+"/webapi/contracts", nil, bearer(tok)...)
		if r.header.Get("RateLimit-Policy") != policy {
			t.Errorf("RateLimit-Policy %q", r.header.Get("RateLimit-Policy"))
		}
		switch r.status {
		case http.StatusOK:
			through++
		case http.StatusTooManyRequests:
			p := r.problem(t)
			if p.Code != "rate_limited" || !slices.Equal(p.ViolatedPolicies, []string{"consumer:minute"}) || r.header.Get("Retry-After") == "" ||
				!strings.Contains(p.Detail, "consumer") ||
				!strings.HasPrefix(r.header.Get("RateLimit"), `"consumer:minute";r=0;`) {
				t.Errorf("refusal %v %s", r.header, r.body)
			}
		default:
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	if through != 3 {
		t.Errorf("%d let through over two keys, want the consumer's 3", through)
	}

	// The consumer's view and its keys.
	var c keystore.Consumer
	do(t, http.MethodGet, adminURL+"/webapi/consumers/"+cid, nil).json(t, &c)
	if c.KeyCount != 2 || c.Name != "ACME" {
		t.Errorf("consumer %+v", c)
	}
	var keys []keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys?consumerId="+cid, nil).json(t, &keys)
	if len(keys) != 2 {
		t.Errorf("%d keys of the consumer", len(keys))
	}
	// Those that take the plan themselves, and a key of neither.
	apart := createKey(t, map[string]any{"service": "contracts", "name": "apart", "owner": "alice", "privileges": []string{"search"}})
	keys = nil
	do(t, http.MethodGet, adminURL+"/webapi/keys?planId="+pid, nil).json(t, &keys)
	if len(keys) != 2 || keys[0].ID != a.ID || keys[1].ID != bk.ID {
		t.Errorf("keys of the plan: %+v", keys)
	}
	if r := do(t, http.MethodDelete, adminURL+"/webapi/keys/"+apart.ID, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete the key apart: %d", r.status)
	}
	var series keystore.UsageSeries
	r = do(t, http.MethodGet, adminURL+"/webapi/consumers/"+cid+"/usage?resolution=day", nil)
	r.json(t, &series)
	var ok, limited uint64
	for _, bk := range series.Buckets {
		ok, limited = ok+bk.OK, limited+bk.Refused["rate_limited"]
	}
	if r.status != 200 || series.ConsumerID != cid || ok != 3 || limited != 3 {
		t.Errorf("consumer usage: %d ok %d limited %d: %s", r.status, ok, limited, r.body)
	}

	// A plan change holds its keys at once: the plan's burst down to 1 a
	// minute per key refuses the next request of a, named "burst".
	if r := do(t, http.MethodPatch, adminURL+"/webapi/consumers/"+cid, map[string]any{"rateLimits": nil}); r.status != 200 {
		t.Fatalf("lifting the consumer's limit: %d %s", r.status, r.body)
	}
	if r := do(t, http.MethodPatch, adminURL+"/webapi/plans/"+pid, map[string]any{"rateLimits": []map[string]any{{"name": "burst", "limit": 1, "windowSeconds": 60}}}); r.status != 200 {
		t.Fatalf("changing the plan: %d %s", r.status, r.body)
	}
	r = do(t, http.MethodGet, siteURL+"/webapi/contracts", nil, bearer(a.Token)...)
	if p := r.problem(t); r.status != 429 || !slices.Equal(p.ViolatedPolicies, []string{"burst"}) || r.header.Get("RateLimit-Policy") != `"burst";q=1;w=60` {
		t.Errorf("after the plan change: %d %v %s", r.status, r.header, r.body)
	}

	// Bad input: a 4xx naming the field, nothing changed.
	bad := []struct {
		name, method, path string
		body               any
		status             int
		field, code        string
	}{
		{"unknown consumerId", "POST", "/webapi/keys", map[string]any{"service": "contracts", "name": "x", "owner": "o", "privileges": []string{"get"}, "consumerId": "9b2f2a64-7a4e-4d0a-9a57-0a3c4c2e9d11"}, 400, "consumerId", "unknown"},
		{"unknown planId", "PATCH", "/webapi/keys/" + a.ID, map[string]any{"planId": "nope"}, 400, "planId", "unknown"},
		{"clashing policy", "PATCH", "/webapi/keys/" + a.ID, map[string]any{"rateLimits": []map[string]any{{"name": "burst", "limit": 9, "windowSeconds": 1}}}, 400, "rateLimits[0].name", "clashes"},
		{"consumer with keys", "DELETE", "/webapi/consumers/" + cid, nil, 409, "id", "conflict"},
		{"plan in use", "DELETE", "/webapi/plans/" + pid, nil, 409, "id", "conflict"},
		{"duplicate externalId", "POST", "/webapi/consumers", map[string]any{"name": "again", "externalId": "acme-1"}, 409, "externalId", "conflict"},
		{"duplicate plan name", "POST", "/webapi/plans", map[string]any{"name": "basic"}, 409, "name", "conflict"},
		{"unknown field", "POST", "/webapi/consumers", map[string]any{"name": "x", "limits": 3}, 400, "limits", "unknown_field"},
		{"consumer without name", "POST", "/webapi/consumers", map[string]any{"description": "x"}, 400, "name", "required"},
		{"unknown consumer", "GET", "/webapi/consumers/nope", nil, 404, "", ""},
		{"unknown plan", "PATCH", "/webapi/plans/nope", map[string]any{"name": "y"}, 404, "", ""},
		{"list parameter", "GET", "/webapi/consumers?x=1", nil, 400, "x", "unknown_parameter"},
		{"keys of an unknown consumer", "GET", "/webapi/keys?consumerId=nope", nil, 400, "consumerId", "unknown"},
		{"keys of an unknown plan", "GET", "/webapi/keys?planId=nope", nil, 400, "planId", "unknown"},
		{"keys of two consumers", "GET", "/webapi/keys?consumerId=" + cid + "&consumerId=nope", nil, 400, "consumerId", "duplicate"},
		{"templates' list with a parameter", "GET", "/webapi/templates?collectionId=x", nil, 400, "collectionId", "unknown_parameter"},
		{"deliveries' limit twice", "GET", "/webapi/webhooks/nope/deliveries?limit=1&limit=2", nil, 400, "limit", "duplicate"},
		{"a name with a trailing space", "POST", "/webapi/plans", map[string]any{"name": "basic "}, 400, "name", "invalid"},
		{"thousands of policies", "POST", "/webapi/plans", map[string]any{"name": "x", "rateLimits": make([]map[string]any, 5000)}, 400, "rateLimits", "too_many"},
		{"a key's PATCH of null", "PATCH", "/webapi/keys/" + a.ID, "null", 400, "(body)", "invalid_type"},
		{"a consumer's PATCH of null", "PATCH", "/webapi/consumers/" + cid, "null", 400, "(body)", "invalid_type"},
		{"a plan's PATCH of null", "PATCH", "/webapi/plans/" + pid, "null", 400, "(body)", "invalid_type"},
	}
	for _, tt := range bad {
		r := do(t, tt.method, adminURL+tt.path, tt.body)
		p := r.problem(t)
		if r.status != tt.status {
			t.Errorf("%s: %d %s", tt.name, r.status, r.body)
			continue
		}
		if tt.field != "" && !slices.ContainsFunc(p.Errors, func(e problem.FieldError) bool { return e.Field == tt.field && e.Code == tt.code }) {
			t.Errorf("%s: errors %+v, want %s %s", tt.name, p.Errors, tt.field, tt.code)
		}
	}
	// A PATCH of {} changes nothing, not even the modification time: it
	// is answered as a read.
	for _, path := range []string{"/webapi/keys/" + a.ID, "/webapi/consumers/" + cid, "/webapi/plans/" + pid} {
		var before, after struct{ LastModificationTime time.Time }
		do(t, http.MethodGet, adminURL+path, nil).json(t, &before)
		r := do(t, http.MethodPatch, adminURL+path, map[string]any{})
		r.json(t, &after)
		if r.status != 200 || before.LastModificationTime.IsZero() || !after.LastModificationTime.Equal(before.LastModificationTime) {
			t.Errorf("PATCH {} of %s: %d, lastModificationTime %v, before %v", path, r.status, after.LastModificationTime, before.LastModificationTime)
		}
	}
	var consumers []keystore.Consumer
	do(t, http.MethodGet, adminURL+"/webapi/consumers", nil).json(t, &consumers)
	var plans []keystore.Plan
	do(t, http.MethodGet, adminURL+"/webapi/plans", nil).json(t, &plans)
	if len(consumers) != 1 || len(plans) != 1 {
		t.Errorf("after the bad input: %d consumers, %d plans", len(consumers), len(plans))
	}

	// Taken apart in order.
	for _, k := range []keystore.Key{a, bk} {
		if r := do(t, http.MethodDelete, adminURL+"/webapi/keys/"+k.ID, nil); r.status != 204 {
			t.Fatalf("deleting key: %d", r.status)
		}
	}
	if r := do(t, http.MethodDelete, adminURL+"/webapi/consumers/"+cid, nil); r.status != 204 {
		t.Fatalf("deleting consumer: %d %s", r.status, r.body)
	}
	if r := do(t, http.MethodDelete, adminURL+"/webapi/plans/"+pid, nil); r.status != 204 {
		t.Fatalf("deleting plan: %d %s", r.status, r.body)
	}

	// The audit log names consumer and plan, of uses and of changes.
	entries := g.auditEntries(t, 7)
	var used, refused, created bool
	for _, e := range entries {
		switch {
		case e["msg"] == "key used" && e["consumer_id"] == cid && e["plan_id"] == pid:
			used = true
		case e["msg"] == "key refused" && e["consumer_id"] == cid && e["reason"] == "rate_limited":
			refused = true
		case e["msg"] == "consumer created" && e["consumer_id"] == cid:
			created = true
		}
	}
	if !used || !refused || !created {
		t.Errorf("audit: used %v refused %v consumer created %v", used, refused, created)
	}
}
