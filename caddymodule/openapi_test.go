package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/keygate/keygate/internal/openapi"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestOpenAPIHandler: webapi_openapi serves the Web API document to
// anyone (the key check guards only the APIs' paths), names the
// gateway's public_base_url or the configured server, lets caches
// revalidate it by ETag, and carries the security headers of every body.
func TestOpenAPIHandler(t *testing.T) {
	startGateway(t, bolt, defaultSite+`
	handle /other/openapi.json {
		webapi_openapi https://api.example.com/
	}
`)
	first := do(t, http.MethodGet, siteURL+"/webapi/openapi.json", nil)
	etag := first.header.Get("ETag")
	tests := []struct {
		name, method, path string
		header             []string
		status             int
		server             string // servers[0].url of the body; "" for no body
	}{
		{"no key needed", http.MethodGet, "/webapi/openapi.json", nil, 200, siteURL},
		{"a key is not looked at", http.MethodGet, "/webapi/openapi.json", bearer("kg_not-a-key"), 200, siteURL},
		{"server_url given", http.MethodGet, "/other/openapi.json", nil, 200, "https://api.example.com/"},
		{"revalidated", http.MethodGet, "/webapi/openapi.json", []string{"If-None-Match", etag}, 304, ""},
		{"revalidated, weak", http.MethodGet, "/webapi/openapi.json", []string{"If-None-Match", `"x", W/` + etag}, 304, ""},
		{"another version", http.MethodGet, "/webapi/openapi.json", []string{"If-None-Match", `"0"`}, 200, siteURL},
		{"HEAD", http.MethodHead, "/webapi/openapi.json", nil, 200, ""},
		{"POST", http.MethodPost, "/webapi/openapi.json", nil, 405, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, tc.method, siteURL+tc.path, nil, tc.header...)
			if r.status != tc.status {
				t.Fatalf("%d, want %d: %s", r.status, tc.status, r.body)
			}
			switch tc.status {
			case 405:
				if p := r.problem(t); p.Code != "method_not_allowed" || r.header.Get("Allow") != "GET, HEAD" {
					t.Fatalf("%+v Allow %q", p, r.header.Get("Allow"))
				}
				return
			case 304:
				if len(r.body) != 0 || r.header.Get("ETag") != etag {
					t.Fatalf("304 with %d bytes, ETag %q", len(r.body), r.header.Get("ETag"))
				}
			}
			if r.header.Get("Cache-Control") != "no-cache" || r.header.Get("ETag") == "" {
				t.Fatalf("Cache-Control %q ETag %q", r.header.Get("Cache-Control"), r.header.Get("ETag"))
			}
			// The security headers of every body (problem.SecureHeaders),
			// but for Cache-Control: the document may be kept and revalidated.
			for k, v := range map[string]string{
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
				"Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
			} {
				if got := r.header.Get(k); got != v {
					t.Errorf("%s %q, want %q", k, got, v)
				}
			}
			if tc.method == http.MethodHead && (len(r.body) != 0 || r.header.Get("Content-Length") != first.header.Get("Content-Length")) {
				t.Fatalf("HEAD: %d bytes, Content-Length %q", len(r.body), r.header.Get("Content-Length"))
			}
			if tc.server == "" {
				return
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("Content-Type %q", ct)
			}
			want, err := openapi.WebAPIFor(tc.server)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.body, want) {
				t.Fatalf("the body is not the document for %s", tc.server)
			}
			doc, err := openapi3.NewLoader().LoadFromData(r.body)
			if err != nil {
				t.Fatal(err)
			}
			if err := doc.Validate(context.Background()); err != nil || !doc.IsOpenAPI31OrLater() {
				t.Fatalf("%s: %v", doc.OpenAPI, err)
			}
			if len(doc.Servers) != 1 || doc.Servers[0].URL != tc.server {
				t.Fatalf("servers %+v, want %s", doc.Servers, tc.server)
			}
		})
	}
	if first.header.Get("ETag") == "" || bytes.Equal(first.body, do(t, http.MethodGet, siteURL+"/other/openapi.json", nil).body) {
		t.Fatal("two servers, one document")
	}
}

// TestRepliesAreChecked: the harness's requests go through the OpenAPI
// check, so that a test cannot pass with a reply the documents do not
// describe.
func TestRepliesAreChecked(t *testing.T) {
	startGateway(t, bolt, defaultSite)
	v, err := openapitest.Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, url string }{
		{"site", siteURL + "/webapi/contracts"},
		{"admin", adminURL + "/webapi/keys"},
	} {
		before := v.Checked()
		r := do(t, http.MethodGet, tc.url, nil)
		if v.Checked() != before+1 {
			t.Errorf("%s: the reply (%d) was not checked", tc.name, r.status)
		}
	}
	// The check itself fails a test on drift: a reply the gateway gave,
	// with a field the document does not have.
	r := do(t, http.MethodGet, adminURL+"/webapi/keys", nil)
	var keys []map[string]any
	r.json(t, &keys)
	body, _ := json.Marshal(append(keys, map[string]any{"id": "x", "unexpected": true}))
	req, _ := http.NewRequest(http.MethodGet, adminURL+"/webapi/keys", nil)
	resp := &http.Response{StatusCode: r.status, Header: r.header, Request: req}
	if err := v.Check(req, nil, resp, body); err == nil {
		t.Fatal("a reply with an undocumented field passed")
	}
}

// TestOpenAPIRateLimitsAndUsage: the replies of the traffic controls,
// checked against the documents like every other (do goes through
// openapitest): a key's rate limits and quota as the admin API shows
// them, the RateLimit headers on each reply to such a key, the 429s of a
// spent policy and quota (on a documented operation and on a path none
// has), the usage series and its refusals.
func TestOpenAPIRateLimitsAndUsage(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		startGateway(t, b, defaultSite)
		v, err := openapitest.Default()
		if err != nil {
			t.Fatal(err)
		}
		before := v.Checked()

		limited := createKey(t, map[string]any{"service": "contracts", "name": "limited", "owner": "alice",
			"privileges": []string{"search"}, "rateLimits": []map[string]any{{"name": "burst", "limit": 1, "windowSeconds": 60}}})
		if len(limited.RateLimits) != 1 || limited.RateLimits[0].Name != "burst" || limited.Quota != nil || limited.QuotaUsed != nil {
			t.Fatalf("created %+v", limited)
		}
		clearOfWindowEdge(time.Minute, 10*time.Second)
		first := do(t, http.MethodGet, siteURL+"/webapi/contracts", nil, bearer(limited.Token)...)
		if first.status != http.StatusOK {
			t.Fatalf("first request: %d %s", first.status, first.body)
		}
		if got := first.header.Get("RateLimit-Policy"); got != `"burst";q=1;w=60` {
			t.Errorf("RateLimit-Policy %q", got)
		}
		if got := first.header.Get("RateLimit"); !strings.HasPrefix(got, `"burst";r=0;t=`) {
			t.Errorf("RateLimit %q", got)
		}
		for _, path := range []string{"/webapi/contracts", "/webapi/contracts/no/such/path"} {
			r := do(t, http.MethodGet, siteURL+path, nil, bearer(limited.Token)...)
			if r.status != http.StatusTooManyRequests {
				t.Fatalf("%s: %d %s, want 429", path, r.status, r.body)
			}
			p := r.problem(t)
			if p.Code != "rate_limited" || !slices.Equal(p.ViolatedPolicies, []string{"burst"}) {
				t.Errorf("%s: %+v", path, p)
			}
			if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 || s > 120 { // a sliding window: up to two of 60 s
				t.Errorf("%s: Retry-After %q", path, r.header.Get("Retry-After"))
			}
		}

		quota := createKey(t, map[string]any{"service": "share", "name": "quota", "owner": "alice",
			"privileges": []string{"get"}, "quota": map[string]any{"limit": 1, "period": "day"}})
		if quota.Quota == nil || quota.Quota.Limit != 1 || quota.QuotaUsed == nil || *quota.QuotaUsed != 0 || quota.QuotaResetsAt == nil {
			t.Fatalf("created %+v", quota)
		}
		share := siteURL + "/webapi/share/8c1f5b7e-2d4a-4f6b-9c8d-7e6f5a4b3c2d"
		if r := do(t, http.MethodGet, share, nil, bearer(quota.Token)...); r.status != http.StatusNotFound ||
			r.header.Get("RateLimit-Policy") != `"quota";q=1;w=86400` {
			t.Fatalf("within the quota: %d %s, RateLimit-Policy %q", r.status, r.body, r.header.Get("RateLimit-Policy"))
		}
		r := do(t, http.MethodGet, share, nil, bearer(quota.Token)...)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("beyond the quota: %d %s", r.status, r.body)
		}
		if p := r.problem(t); p.Code != "quota_exceeded" || !slices.Equal(p.ViolatedPolicies, []string{"quota"}) {
			t.Errorf("beyond the quota: %+v", p)
		}
		var k map[string]any
		do(t, http.MethodGet, adminURL+"/webapi/keys/"+quota.ID, nil).json(t, &k)
		if k["quotaUsed"] != 1.0 {
			t.Errorf("quotaUsed %v, want 1", k["quotaUsed"])
		}
		// Both removed: the key has no policies left, and its replies no
		// RateLimit headers.
		r = do(t, http.MethodPatch, adminURL+"/webapi/keys/"+quota.ID, map[string]any{"rateLimits": nil, "quota": nil})
		r.json(t, &k)
		if r.status != http.StatusOK || k["quota"] != nil || k["quotaUsed"] != nil || k["quotaResetsAt"] != nil {
			t.Fatalf("removing the quota: %d %s", r.status, r.body)
		}
		if r := do(t, http.MethodGet, share, nil, bearer(quota.Token)...); r.status != http.StatusNotFound || r.header.Get("RateLimit-Policy") != "" {
			t.Fatalf("without a quota: %d, RateLimit-Policy %q", r.status, r.header.Get("RateLimit-Policy"))
		}
		r = do(t, http.MethodPost, adminURL+"/webapi/keys", map[string]any{"service": "share", "name": "bad", "owner": "alice",
			"privileges": []string{"get"}, "rateLimits": []map[string]any{{"name": "quota", "limit": 1, "windowSeconds": 1}}})
		if r.status != http.StatusBadRequest {
			t.Fatalf("a policy named quota: %d %s", r.status, r.body)
		}

		usage := adminURL + "/webapi/keys/" + limited.ID + "/usage"
		for _, q := range []string{"", "?resolution=hour", "?resolution=day",
			"?from=" + url.QueryEscape(time.Now().Add(-3*time.Hour).UTC().Format(time.RFC3339))} {
			// Asked again while a usage flush is under way: it takes the
			// hours out of memory before the database has them, and the
			// series shows neither for that moment.
			deadline := time.Now().Add(testwait.Generous)
			for {
				r := do(t, http.MethodGet, usage+q, nil)
				if r.status != http.StatusOK {
					t.Fatalf("usage%s: %d %s", q, r.status, r.body)
				}
				var series struct {
					KeyID   string `json:"keyId"`
					Buckets []struct {
						OK      uint64            `json:"ok"`
						Refused map[string]uint64 `json:"refused"`
					} `json:"buckets"`
				}
				r.json(t, &series)
				var ok, refused uint64
				for _, b := range series.Buckets {
					ok += b.OK
					refused += b.Refused["rate_limited"]
				}
				if series.KeyID == limited.ID && ok == 1 && refused == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("usage%s: want 1 ok and 2 rate_limited, got %s", q, r.body)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		for _, q := range []string{"?resolution=week", "?from=yesterday", "?color=red", "?resolution=day&resolution=hour",
			"?from=" + url.QueryEscape(time.Now().Add(-100*24*time.Hour).UTC().Format(time.RFC3339)),
			"?to=" + url.QueryEscape(time.Now().Add(-48*time.Hour).UTC().Format(time.RFC3339)) + "&from=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339))} {
			if r := do(t, http.MethodGet, usage+q, nil); r.status != http.StatusBadRequest {
				t.Errorf("usage%s: %d %s, want 400", q, r.status, r.body)
			}
		}
		if r := do(t, http.MethodGet, adminURL+"/webapi/keys/no-such-key/usage", nil); r.status != http.StatusNotFound {
			t.Errorf("usage of no key: %d %s", r.status, r.body)
		}
		if v.Checked() == before {
			t.Fatal("no reply was checked")
		}
	})
}
