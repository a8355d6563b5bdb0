package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/keygate/keygate/internal/openapi"
	"github.com/keygate/keygate/internal/openapitest"
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
