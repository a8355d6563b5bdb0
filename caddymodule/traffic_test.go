package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/traffic"
)

// checkRefusalHeaders: a 429 of the key check keeps the security headers
// but not Cache-Control, which no cache may apply to a 429, and so has
// at most eight headers in the map (Server among them; net/http writes
// Date and Content-Length outside it): a ninth makes every refusal of a
// flood allocate a header table twice.
func checkRefusalHeaders(t *testing.T, h http.Header) {
	t.Helper()
	problemtest.SecureHeaders(t, http.StatusTooManyRequests, h)
	n := len(h)
	for _, name := range []string{"Date", "Content-Length"} {
		if _, ok := h[name]; ok {
			n--
		}
	}
	if n > 8 {
		t.Errorf("a 429 with %d headers besides Date and Content-Length, want at most 8: %v", n, h)
	}
}

// TestRateLimits: a key with policies carries the RateLimit headers on
// every response, is refused 429 rate_limited with Retry-After and
// violatedPolicies beyond its limit before the privilege is looked at,
// counted and audited once a second; a key without policies has no
// headers. On both backends.
func TestRateLimits(t *testing.T) { eachBackend(t, testRateLimits) }

func testRateLimits(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	k := createKey(t, map[string]any{"service": "contracts", "name": "limited", "owner": "alice", "privileges": []string{"search"},
		"rateLimits": []map[string]any{{"name": "burst", "limit": 3, "windowSeconds": 60}, {"name": "hour", "limit": 1000, "windowSeconds": 3600}}})
	if len(k.RateLimits) != 2 || k.RateLimits[0] != (traffic.RateLimit{Name: "burst", Limit: 3, WindowSeconds: 60}) {
		t.Fatalf("created %+v", k.RateLimits)
	}
	plain := createKey(t, map[string]any{"service": "contracts", "name": "plain", "owner": "bob", "privileges": []string{"search"}})
	const policy = `"burst";q=3;w=60, "hour";q=1000;w=3600`
	refusedBefore := metricValue(t, `keygate_auth_refusals_total{reason="rate_limited",service="contracts"}`)
	clearOfWindowEdge(time.Minute, 10*time.Second)
	for i := 1; i <= 3; i++ {
		r := do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(k.Token)...)
		// Restored in full once this window and the next have passed.
		var remaining, reset int
		_, err := fmt.Sscanf(r.header.Get("RateLimit"), `"burst";r=%d;t=%d`, &remaining, &reset)
		if r.status != 200 || r.header.Get("RateLimit-Policy") != policy || err != nil || remaining != 3-i || reset <= 60 || reset > 120 {
			t.Fatalf("request %d: %d %v", i, r.status, r.header)
		}
	}
	// Beyond the limit: refused before the privilege (the key lacks
	// create) and the handler, whatever the request.
	floodStart := time.Now()
	for i := range 5 {
		r := do(t, "POST", siteURL+"/webapi/contracts", `{not even json`, bearer(k.Token)...)
		p := r.problem(t)
		retry, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != 429 || p.Code != "rate_limited" || !slices.Equal(p.ViolatedPolicies, []string{"burst"}) || retry < 1 || retry > 120 ||
			r.header.Get("RateLimit-Policy") != policy || !strings.HasPrefix(r.header.Get("RateLimit"), `"burst";r=0;t=`) {
			t.Fatalf("refusal %d: %d %v %s", i, r.status, r.header, r.body)
		}
		checkRefusalHeaders(t, r.header)
	}
	flood := time.Since(floodStart)
	if n := metricValue(t, `keygate_auth_refusals_total{reason="rate_limited",service="contracts"}`); n != refusedBefore+5 {
		t.Errorf("%d rate_limited refusals counted, want %d", n, refusedBefore+5)
	}
	// The refusals do not add to usageCount; usage over time has them.
	var got keystore.Key
	do(t, "GET", adminURL+"/webapi/keys/"+k.ID, nil).json(t, &got)
	if got.UsageCount != 3 {
		t.Errorf("usageCount %d, want the 3 let through", got.UsageCount)
	}
	var series keystore.UsageSeries
	r := do(t, "GET", adminURL+"/webapi/keys/"+k.ID+"/usage", nil)
	r.json(t, &series)
	if r.status != 200 || series.Resolution != "hour" || len(series.Buckets) < 48 {
		t.Fatalf("usage: %d %s", r.status, r.body)
	}
	var ok, limited uint64 // the test may straddle an hour
	for _, b := range series.Buckets {
		ok, limited = ok+b.OK, limited+b.Refused["rate_limited"]
	}
	if ok != 3 || limited != 5 {
		t.Errorf("usage over time: %d ok, %d rate_limited; want 3 and 5: %+v", ok, limited, series.Buckets[len(series.Buckets)-2:])
	}
	// A flood is audited once a second, with the count it stands for:
	// the first refusal at once, the ones after it a second later in an
	// entry of their own (no request's path when it stands for several).
	// A flood of under a second has exactly those two entries; a slow
	// machine may spread it over more seconds, an entry for each.
	var entries []map[string]any
	refusals := 0.0
	testwait.For(t, testwait.Generous, "the five refusals to be audited", func() bool {
		entries, refusals = nil, 0
		for _, line := range strings.Split(g.readLogs(t, ""), "\n") {
			if strings.Contains(line, `"reason":"rate_limited"`) {
				var e map[string]any
				must(t, "audit line", json.Unmarshal([]byte(line), &e))
				entries = append(entries, e)
				n, _ := e["refusals"].(float64)
				refusals += n
			}
		}
		return refusals >= 5
	})
	if len(entries) < 2 || refusals != 5 || entries[0]["refusals"] != 1.0 || entries[0]["path"] != "/webapi/contracts" ||
		(flood < time.Second && (len(entries) != 2 || entries[1]["refusals"] != 4.0)) || len(entries)-1 > int(flood/time.Second)+2 {
		t.Errorf("rate_limited audit entries of a flood of %v: %v, want one at once and the four after it in one entry a second", flood, entries)
	}
	for _, e := range entries[1:] {
		if e["key_id"] != k.ID || e["status"] != 429.0 || (e["refusals"] != 1.0 && e["path"] != "") {
			t.Errorf("audit entry of the flood %v", e)
		}
	}
	// No policies, no headers.
	if r := do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(plain.Token)...); r.status != 200 || r.header.Get("RateLimit") != "" || r.header.Get("RateLimit-Policy") != "" {
		t.Errorf("a key without policies: %d %v", r.status, r.header)
	}
	// Removing the policies lifts the limit at once.
	if r := do(t, "PATCH", adminURL+"/webapi/keys/"+k.ID, map[string]any{"rateLimits": nil}); r.status != 200 {
		t.Fatalf("removing the policies: %d %s", r.status, r.body)
	}
	if r := do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(k.Token)...); r.status != 200 || r.header.Get("RateLimit") != "" {
		t.Errorf("after removing the policies: %d %v", r.status, r.header)
	}
}

// TestQuotaOverAPI: a quota key spends exactly its quota, then 429
// quota_exceeded with Retry-After to the next period; its JSON shows
// quotaUsed and quotaResetsAt; key.quota_exhausted reaches its
// subscribers once. On both backends.
func TestQuotaOverAPI(t *testing.T) { eachBackend(t, testQuotaOverAPI) }

func testQuotaOverAPI(t *testing.T, b backend) {
	startGateway(t, b, echoSite)
	hooks := newHookReceiver(t)
	if r := do(t, "POST", adminURL+"/webapi/webhooks", map[string]any{"url": hooks.URL + "/keys", "events": []string{"key.quota_exhausted"}}); r.status != 201 {
		t.Fatalf("subscribe: %d %s", r.status, r.body)
	}
	k := createKey(t, map[string]any{"service": "contracts", "name": "quota", "owner": "alice", "privileges": []string{"search"},
		"quota": map[string]any{"limit": 5, "period": "day"}})
	// The seven requests and the checks after them fall in one UTC day.
	clearOfWindowEdge(24*time.Hour, time.Minute)
	nextDay := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	for i := 1; i <= 7; i++ {
		sent := time.Now()
		r := do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(k.Token)...)
		received := time.Now()
		if r.header.Get("RateLimit-Policy") != `"quota";q=5;w=86400` {
			t.Fatalf("request %d: RateLimit-Policy %q", i, r.header.Get("RateLimit-Policy"))
		}
		if i <= 5 {
			if r.status != 200 || !strings.HasPrefix(r.header.Get("RateLimit"), fmt.Sprintf(`"quota";r=%d;t=`, 5-i)) {
				t.Fatalf("request %d: %d %v", i, r.status, r.header)
			}
			continue
		}
		p := r.problem(t)
		// The gateway rounds the time left up to whole seconds, as of
		// some instant between sending and receiving.
		retry, _ := strconv.Atoi(r.header.Get("Retry-After"))
		if r.status != 429 || p.Code != "quota_exceeded" || !slices.Equal(p.ViolatedPolicies, []string{"quota"}) ||
			time.Duration(retry)*time.Second < nextDay.Sub(received) || time.Duration(retry)*time.Second >= nextDay.Sub(sent)+time.Second {
			t.Fatalf("request %d: %d retry %d %s", i, r.status, retry, r.body)
		}
		checkRefusalHeaders(t, r.header)
	}
	var got keystore.Key
	do(t, "GET", adminURL+"/webapi/keys/"+k.ID, nil).json(t, &got)
	if got.QuotaUsed == nil || *got.QuotaUsed != 5 || got.QuotaResetsAt == nil || !got.QuotaResetsAt.Equal(nextDay) || got.Quota == nil || got.Quota.Limit != 5 {
		t.Errorf("key: used %v resets %v quota %+v", got.QuotaUsed, got.QuotaResetsAt, got.Quota)
	}
	_, bodies := hooks.wait(t, 1)
	var ev struct {
		Type string         `json:"type"`
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(bodies[0], &ev); err != nil || ev.Type != "key.quota_exhausted" || ev.Data["id"] != k.ID || strings.Contains(string(bodies[0]), k.Token) ||
		fmt.Sprint(ev.Data["quota"]) != "map[limit:5 period:day]" || ev.Data["periodStart"] != nextDay.Add(-24*time.Hour).Format(time.RFC3339) {
		t.Errorf("delivery %s (%v)", bodies[0], err)
	}
	// Raising the quota opens the key again, in the same period.
	if r := do(t, "PATCH", adminURL+"/webapi/keys/"+k.ID, map[string]any{"quota": map[string]any{"limit": 6, "period": "day"}}); r.status != 200 {
		t.Fatalf("raising the quota: %d %s", r.status, r.body)
	}
	time.Sleep(1100 * time.Millisecond) // the instance asks again a second after a refusal
	if r := do(t, "GET", siteURL+"/webapi/contracts", nil, bearer(k.Token)...); r.status != 200 {
		t.Errorf("after raising the quota: %d %s", r.status, r.body)
	}
	time.Sleep(300 * time.Millisecond)
	if _, bodies := hooks.wait(t, 1); len(bodies) != 1 {
		t.Errorf("%d key.quota_exhausted deliveries, want one a period", len(bodies))
	}
}

// TestTrafficInput: every bad field of a key's policies and quota, and
// of a usage query, answers 400 naming each at once, and changes
// nothing.
func TestTrafficInput(t *testing.T) {
	startGateway(t, bolt, echoSite)
	k := createKey(t, map[string]any{"service": "contracts", "name": "in", "owner": "alice", "privileges": []string{"search"}})
	for _, tc := range []struct {
		name, method, path string
		body               any
		want               []string
	}{
		{"create", "POST", "/webapi/keys", map[string]any{"service": "contracts", "name": "x", "owner": "o", "privileges": []string{"get"},
			"rateLimits": []map[string]any{{"name": "A", "limit": 0, "windowSeconds": 0}}, "quota": map[string]any{"limit": -1, "period": "year"}},
			[]string{"rateLimits[0].name", "rateLimits[0].limit", "rateLimits[0].windowSeconds", "quota.limit", "quota.period"}},
		{"wrong types and unknown fields", "PATCH", "/webapi/keys/" + k.ID, `{"name":"","rateLimits":[{"name":"ok","limit":1,"windowSeconds":1},{"name":"b","limit":"10","windowSeconds":1,"x":1}],"quota":{"limit":5,"period":"week"}}`,
			[]string{"name", "rateLimits[1].x", "rateLimits[1].limit", "quota.period"}},
		{"update", "PATCH", "/webapi/keys/" + k.ID, map[string]any{"rateLimits": []map[string]any{{"name": "a", "limit": 1.5, "windowSeconds": 90000}}},
			[]string{"rateLimits[0].limit", "rateLimits[0].windowSeconds"}},
		{"usage", "GET", "/webapi/keys/" + k.ID + "/usage?resolution=week&from=yesterday&to=2026-13-01&x=1", nil,
			[]string{"resolution", "to", "from", "x"}},
		{"usage bounds", "GET", "/webapi/keys/" + k.ID + "/usage?from=2000-01-01T00:00:00Z", nil, []string{"from"}},
		{"usage end past 48 hours ahead", "GET", "/webapi/keys/" + k.ID + "/usage?to=" + time.Now().Add(49*time.Hour).UTC().Format(time.RFC3339), nil, []string{"to"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, adminURL+tc.path, tc.body)
			p := r.problem(t)
			var fields []string
			for _, e := range p.Errors {
				fields = append(fields, e.Field)
			}
			slices.Sort(fields)
			want := slices.Sorted(slices.Values(tc.want))
			if r.status != http.StatusBadRequest || !slices.Equal(fields, want) {
				t.Errorf("%d fields %v, want %v: %s", r.status, fields, want, r.body)
			}
		})
	}
	var got keystore.Key
	do(t, "GET", adminURL+"/webapi/keys/"+k.ID, nil).json(t, &got)
	if len(got.RateLimits) != 0 || got.Quota != nil || !got.LastModificationTime.Equal(k.LastModificationTime) {
		t.Errorf("a refused update changed the key: %+v", got)
	}
	if r := do(t, "GET", adminURL+"/webapi/keys/00000000-0000-0000-0000-000000000000/usage", nil); r.status != 404 {
		t.Errorf("usage of an unknown key: %d", r.status)
	}
}
