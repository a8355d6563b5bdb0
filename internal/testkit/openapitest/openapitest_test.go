package openapitest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/openapi"
)

const (
	contractID = "0190a6e4-5c1e-7d2a-9f3b-1a2b3c4d5e6f"
	signerID   = "6f1d0a52-3d59-4b8e-9a3e-0c7b1f2e4d5a"
	shareUUID  = "8c1f5b7e-2d4a-4f6b-9c8d-7e6f5a4b3c2d"
	token      = "kg_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
)

var contract = `{"id":"` + contractID + `","templateId":"PAGE-1","collectionId":"LEGAL","name":"NDA",
"createdById":"alice","creationTimestamp":"2026-11-22T10:15:00.000Z","expirationTimestamp":"2026-11-29T10:15:00.000Z",
"sequentialSigning":false,"status":"sent","signers":[{"id":"` + signerID + `","fullName":"Bob","accessKind":"email",
"email":"bob@example.com","otpMethod":"email","signerSigningMethods":["upload","render","draw"],
"appendSignatureMacro":false,"receivesCompletedContract":true}]}`

var share = `{"id":1,"uuid":"` + shareUUID + `","type":"ISSUE","issueId":"10001","projectId":null,"board":null,"jql":null,
"passwordProtected":false,"expiration":null,"expirationExpression":null,"fieldsConfig":null,"selectedUsersConfig":null,
"createdBy":"alice","createdAt":1764000000000,"updatedBy":"alice","updatedAt":1764000000000,"status":"ACTIVE",
"openedCount":0,"url":"http://localhost:8080/s/` + shareUUID + `"}`

const problem404 = `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"no such resource"}`

const (
	problem429 = `{"type":"about:blank","title":"Too Many Requests","status":429,"code":"rate_limited","detail":"x","violatedPolicies":["burst"]}`
	policy     = `"burst";q=20;w=1, "minute";q=600;w=60, "quota";q=100000;w=2592000`
	keyID      = "3b9c1f0e-8a7d-4c6b-9e5f-2d1a0b9c8d7e"
)

// limited are the headers of a reply to a key with rate limits.
func limited(h http.Header) http.Header {
	h.Set("RateLimit-Policy", policy)
	h.Set("RateLimit", `"minute";r=412;t=37`)
	return h
}

var usage = `{"keyId":"` + keyID + `","resolution":"hour","from":"2026-11-22T10:00:00Z","to":"2026-11-22T12:00:00Z",
"buckets":[{"start":"2026-11-22T10:00:00Z","ok":3,"refused":{}},{"start":"2026-11-22T11:00:00Z","ok":0,"refused":{"rate_limited":2,"quota_exceeded":1}}]}`

var adminKey = `{"id":"` + keyID + `","service":"contracts","name":"k","description":"","owner":"alice","privileges":["get"],
"notValidBefore":null,"notValidAfter":null,"allowedIps":[],"creationTime":"2026-11-22T10:15:00Z","lastModificationTime":"2026-11-22T10:15:00Z",
"lastUsageTime":null,"usageCount":0,"tokenPrefix":"kg_AAAAAAAAA","enabled":true,"previousTokenExpiry":null,
"rateLimits":[{"name":"burst","limit":1,"windowSeconds":60}],"quota":{"limit":100,"period":"month"},"quotaUsed":0,"quotaResetsAt":"2026-12-01T00:00:00Z","consumerId":null,"planId":null}`

func secure(h http.Header) http.Header {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'")
	h.Set("Cache-Control", "no-store")
	return h
}

// TestCheck: what a reply must be to pass, and each kind of drift that
// fails it.
func TestCheck(t *testing.T) {
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	auth := http.Header{"Authorization": {"Bearer " + token}}
	jsonReq := http.Header{"Authorization": {"Bearer " + token}, "Content-Type": {"application/json"}}
	tests := []struct {
		name         string
		method, path string
		reqHeader    http.Header
		reqBody      string
		status       int
		header       http.Header
		body         string
		want         string // "" to pass, else a part of the error
	}{
		{"contract get", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, contract, ""},
		{"undocumented field", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(contract, `"status":"sent"`, `"status":"sent","color":"red"`, 1), "color"},
		{"status outside its enum", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(contract, `"status":"sent"`, `"status":"done"`, 1), "status"},
		{"timestamp without milliseconds", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(contract, `10:15:00.000Z"`, `10:15:00Z"`, 1), "creationTimestamp"},
		{"e-mail that is not one", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(contract, `bob@example.com`, `Bob <bob@example.com>`, 1), "email"},
		{"undocumented status", "GET", "/webapi/contracts/" + contractID, auth, "", 418,
			http.Header{"Content-Type": {"application/problem+json"}}, problem404, "status 418 is not documented"},
		{"undocumented header", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}, "X-Debug": {"1"}}, contract, "header X-Debug"},
		{"missing required header", "GET", "/webapi/contracts/" + contractID, auth, "", 401,
			http.Header{"Content-Type": {"application/problem+json"}},
			`{"type":"about:blank","title":"Unauthorized","status":401,"code":"invalid_key"}`, "WWW-Authenticate"},
		{"problem code of another status", "GET", "/webapi/contracts/" + contractID, auth, "", 404,
			http.Header{"Content-Type": {"application/problem+json"}},
			`{"type":"about:blank","title":"Not Found","status":404,"code":"gone"}`, "code"},
		{"404 problem", "GET", "/webapi/contracts/" + contractID, auth, "", 404,
			http.Header{"Content-Type": {"application/problem+json"}}, problem404, ""},
		{"media type not documented", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"text/html"}}, "<p>hi</p>", "Content-Type"},
		{"no key, refused", "GET", "/webapi/contracts/" + contractID, nil, "", 401,
			http.Header{"Content-Type": {"application/problem+json"}, "Www-Authenticate": {`Bearer realm="webapi"`}},
			`{"type":"about:blank","title":"Unauthorized","status":401,"code":"missing_key","detail":"x"}`, ""},
		{"no key, accepted", "GET", "/webapi/contracts/" + contractID, nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, contract, "the document refuses the request"},
		{"bad body refused", "POST", "/webapi/contracts", jsonReq, `{"name":"x"}`, 400,
			http.Header{"Content-Type": {"application/problem+json"}},
			`{"type":"about:blank","title":"Bad Request","status":400,"code":"invalid_request","detail":"1 field is invalid","errors":[{"field":"templateId","code":"required","message":"templateId is required"}]}`, ""},
		{"bad body accepted", "POST", "/webapi/contracts", jsonReq, `{"name":"x"}`, 201,
			http.Header{"Content-Type": {"application/json"}, "Location": {"/webapi/contracts/" + contractID}}, contract, "the document refuses the request"},
		{"201 without Location", "POST", "/webapi/contracts", jsonReq,
			`{"templateId":"PAGE-1","name":"NDA","signers":[{"fullName":"Bob","accessKind":"email","email":"bob@example.com"}]}`, 201,
			http.Header{"Content-Type": {"application/json"}}, contract, "Location"},
		{"share list", "GET", "/webapi/share?limit=5", auth, "", 200,
			http.Header{"Content-Type": {"application/json"}, "X-Total-Count": {"1"}}, "[" + share + "]", ""},
		{"share with a field absent instead of null", "GET", "/webapi/share/" + shareUUID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(share, `"jql":null,`, ``, 1), "jql"},
		{"unknown path, 404 problem", "GET", "/webapi/contracts/" + contractID + "/nothing", auth, "", 404,
			http.Header{"Content-Type": {"application/problem+json"}}, problem404, ""},
		{"unknown path, 200", "GET", "/webapi/contracts/" + contractID + "/nothing", auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, `{}`, "no operation"},
		{"other method, 405 with Allow", "POST", "/webapi/contracts/" + contractID, auth, "", 405,
			http.Header{"Content-Type": {"application/problem+json"}, "Allow": {"GET, PATCH, DELETE"}},
			`{"type":"about:blank","title":"Method Not Allowed","status":405,"code":"method_not_allowed"}`, ""},
		{"other method, 405 without Allow", "POST", "/webapi/contracts/" + contractID, auth, "", 405,
			http.Header{"Content-Type": {"application/problem+json"}},
			`{"type":"about:blank","title":"Method Not Allowed","status":405,"code":"method_not_allowed"}`, "Allow"},
		{"signing page as HTML", "GET", "/sign/AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", nil, "", 200,
			http.Header{"Content-Type": {"text/html; charset=utf-8"}}, "<!doctype html>", ""},
		{"admin key list", "GET", "/webapi/keys?service=share", nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, `[]`, ""},
		{"HEAD of a documented GET", "HEAD", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}}, "", ""},
		{"HEAD with an undocumented status", "HEAD", "/webapi/contracts/" + contractID, auth, "", 202,
			http.Header{"Content-Type": {"application/json"}}, "", "status 202"},
		{"contract get with RateLimit headers", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			limited(http.Header{"Content-Type": {"application/json"}}), contract, ""},
		{"RateLimit not in its syntax", "GET", "/webapi/contracts/" + contractID, auth, "", 200,
			http.Header{"Content-Type": {"application/json"}, "Ratelimit-Policy": {policy}, "Ratelimit": {"remaining=3"}}, contract, "'remaining=3' does not match"},
		{"204 with RateLimit headers", "DELETE", "/webapi/share/" + shareUUID, auth, "", 204,
			limited(http.Header{}), "", ""},
		{"404 with RateLimit headers", "GET", "/webapi/share/" + shareUUID, auth, "", 404,
			limited(http.Header{"Content-Type": {"application/problem+json"}}), problem404, ""},
		{"429 rate_limited", "GET", "/webapi/contracts/" + contractID, auth, "", 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"3"}}), problem429, ""},
		{"429 quota_exceeded", "POST", "/webapi/share", jsonReq, `{"type":"ISSUE","issueId":"10001"}`, 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"86400"}}),
			`{"type":"about:blank","title":"Too Many Requests","status":429,"code":"quota_exceeded","violatedPolicies":["quota"]}`, ""},
		{"429 without violatedPolicies", "GET", "/webapi/contracts/" + contractID, auth, "", 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"3"}}),
			`{"type":"about:blank","title":"Too Many Requests","status":429,"code":"rate_limited"}`, "violatedPolicies"},
		{"429 without Retry-After", "GET", "/webapi/contracts/" + contractID, auth, "", 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}}), problem429, "Retry-After"},
		{"429 of another code", "GET", "/webapi/contracts/" + contractID, auth, "", 429,
			http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"3"}},
			strings.Replace(problem429, "rate_limited", "invalid_key", 1), "code"},
		{"503 of a quota key", "GET", "/webapi/share/" + shareUUID, auth, "", 503,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"1"}}),
			`{"type":"about:blank","title":"Service Unavailable","status":503,"code":"unavailable","detail":"x"}`, ""},
		{"unknown path, 429", "GET", "/webapi/contracts/" + contractID + "/nothing", auth, "", 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"3"}}), problem429, ""},
		{"429 with Cache-Control", "GET", "/webapi/contracts/" + contractID, auth, "", 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"3"}, "Cache-Control": {"no-store"}}), problem429, "Cache-Control"},
		{"unknown path, 429 with Cache-Control", "GET", "/webapi/contracts/" + contractID + "/nothing", auth, "", 429,
			limited(http.Header{"Content-Type": {"application/problem+json"}, "Retry-After": {"3"}, "Cache-Control": {"no-store"}}), problem429, "Cache-Control"},
		{"unknown path, RateLimit-Policy not in its syntax", "GET", "/webapi/contracts/" + contractID + "/nothing", auth, "", 404,
			http.Header{"Content-Type": {"application/problem+json"}, "Ratelimit-Policy": {"burst=20"}}, problem404, "header Ratelimit-Policy"},
		{"admin key with rate limits and a quota", "GET", "/webapi/keys/" + keyID, nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, adminKey, ""},
		{"admin key named quota", "GET", "/webapi/keys/" + keyID, nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(adminKey, `"name":"burst"`, `"name":"quota"`, 1), "name"},
		{"key usage", "GET", "/webapi/keys/" + keyID + "/usage?resolution=hour", nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, usage, ""},
		{"key usage with an unknown refusal", "GET", "/webapi/keys/" + keyID + "/usage", nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, strings.Replace(usage, "quota_exceeded", "teapot", 1), "teapot"},
		{"key usage by week", "GET", "/webapi/keys/" + keyID + "/usage?resolution=week", nil, "", 200,
			http.Header{"Content-Type": {"application/json"}}, usage, "the document refuses the request"},
		{"not the API", "GET", "/metrics", nil, "", 200,
			http.Header{"Content-Type": {"text/plain"}, "X-Anything": {"1"}}, "whatever", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, "http://gateway.test"+tc.path, strings.NewReader(tc.reqBody))
			for k, vs := range tc.reqHeader {
				req.Header[k] = vs
			}
			resp := &http.Response{StatusCode: tc.status, Header: secure(tc.header.Clone()), Request: req}
			if (tc.status == http.StatusNoContent || tc.status == http.StatusTooManyRequests) && tc.header.Get("Cache-Control") == "" {
				resp.Header.Del("Cache-Control") // a 204 and a 429 carry none
			}
			err := v.Check(req, []byte(tc.reqBody), resp, []byte(tc.body))
			if err != nil && testing.Verbose() {
				t.Log(err)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected mismatch: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("passed, want a mismatch about %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Fatalf("mismatch %v\ndoes not name %q", err, tc.want)
			}
		})
	}
}

// TestTransport: the transport hands the reply on unchanged and reports a
// mismatch to the fallback when no test is in the request's context.
func TestTransport(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write([]byte(`{"totalCount":0,"unexpected":true}`))
	}))
	defer srv.Close()
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	var f Failures
	client := &http.Client{Transport: v.Transport(nil, f.Add)}
	req, _ := http.NewRequest("GET", srv.URL+"/webapi/contracts", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(body, []byte(`{"totalCount":0,"unexpected":true}`)) {
		t.Fatalf("body %q", body)
	}
	errs := f.Take()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "searchContracts") || !strings.Contains(errs[0].Error(), "unexpected") {
		t.Fatalf("failures %v", errs)
	}
}

// TestKeyCheckOnly: behind a host that runs the key check in front of
// something else, only the key check's problem replies are checked.
func TestKeyCheckOnly(t *testing.T) {
	v, err := New(openapi.WebAPI(), openapi.Admin())
	if err != nil {
		t.Fatal(err)
	}
	v.SetHost("echo.test", KeyCheckOnly)
	req := httptest.NewRequest("GET", "http://echo.test/webapi/contracts/x", nil)
	echo := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/plain"}}}
	if err := v.Check(req, nil, echo, []byte("op=get")); err != nil {
		t.Fatalf("an echo reply was checked: %v", err)
	}
	refusal := &http.Response{StatusCode: 401, Header: http.Header{"Content-Type": {"application/problem+json"}, "Cache-Control": {"no-store"}}}
	err = v.Check(req, nil, refusal, []byte(`{"type":"about:blank","title":"Unauthorized","status":401,"code":"missing_key"}`))
	if err == nil || !strings.Contains(err.Error(), "WWW-Authenticate") {
		t.Fatalf("a refusal without WWW-Authenticate: %v", err)
	}
	if v.Checked() != 1 {
		t.Fatalf("checked %d, want 1", v.Checked())
	}
}
