package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
)

// Hostile input at the edges, against the real binary running the default
// Caddyfile's site block: what every page and problem body carries, what a
// malformed body gets, and that a slow client is cut off.

// hostileDefaultSite is the body of the site block of the shipped
// Caddyfile, so that these tests cover what is deployed, the catch-all
// included, rather than a copy of it.
func hostileDefaultSite(t *testing.T) string {
	t.Helper()
	root, err := gatewayproc.ModuleRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	const site = "\n:{$KEYGATE_PORT:8080} {\n"
	i := strings.Index(s, site)
	j := -1
	if i >= 0 {
		j = strings.Index(s[i:], "\n}\n") // the block's end, before the keys page's site
	}
	if i < 0 || j < 0 {
		t.Fatal("the default Caddyfile has no site block on {$KEYGATE_PORT:8080}")
	}
	return s[i+len(site) : i+j]
}

type hostileReply struct {
	status int
	header http.Header
	body   []byte
}

func (r hostileReply) problemCode(t *testing.T) string {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %.300s", ct, r.body)
	}
	var p struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != r.status {
		t.Fatalf("problem body %.300s (%v) does not match status %d", r.body, err, r.status)
	}
	return p.Code
}

// hostileNoRedirect lets the tests see a 303 as it is sent.
var hostileNoRedirect = &http.Client{
	Timeout:       30 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// hostileDo sends body as is (a string or bytes) with the header pairs.
func hostileDo(t *testing.T, method, url string, body []byte, header ...string) hostileReply {
	t.Helper()
	return sendWith(t, hostileNoRedirect, method, url, body, header...)
}

// sendWith sends body as is with the header pairs through client, and
// reads the whole reply.
func sendWith(t *testing.T, client *http.Client, method, url string, body []byte, header ...string) hostileReply {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if strings.EqualFold(header[i], "Host") {
			req.Host = header[i+1] // net/http sends req.Host, not a Host header
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return hostileReply{status: resp.StatusCode, header: resp.Header, body: b}
}

func hostileJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostileFixture is a gateway with a contract key, a share key, a contract
// with a url signer and a share with a password.
type hostileFixture struct {
	g                     *gatewayproc.Gateway
	contractKey, shareKey string
	weakKey               string // a contracts key with get only
	contractID, signURL   string
	shareURL              string
}

func hostileStart(t *testing.T, o gatewayproc.Options) *hostileFixture {
	t.Helper()
	if o.Site == "" {
		o.Site = hostileDefaultSite(t)
	}
	f := &hostileFixture{g: start(t, o)}
	ck, err := f.g.CreateKey("contracts", "hostile", "alice", []string{"get", "search", "create", "archive", "delete"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	wk, err := f.g.CreateKey("contracts", "weak", "alice", []string{"get"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := f.g.CreateKey("share", "hostile", "alice", []string{"get", "list", "create", "delete"}, map[string]any{"adminProjects": []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	f.contractKey, f.weakKey, f.shareKey = ck.Token, wk.Token, sk.Token
	if err := f.g.AddTemplate("PAGE-1", "LEGAL", "NDA", "Keep secrets."); err != nil {
		t.Fatal(err)
	}
	r := hostileDo(t, "POST", f.g.Site+"/webapi/contracts", hostileJSON(t, map[string]any{
		"templateId": "PAGE-1", "name": "NDA",
		"signers": []map[string]any{{"fullName": "Bob", "accessKind": "url", "otpMethod": "none"}},
	}), "Authorization", "Bearer "+f.contractKey, "Content-Type", "application/json")
	if r.status != 201 {
		t.Fatalf("creating a contract: %d %s", r.status, r.body)
	}
	var c struct {
		ID      string `json:"id"`
		Signers []struct {
			AccessURL string `json:"accessUrl"`
		} `json:"signers"`
	}
	if err := json.Unmarshal(r.body, &c); err != nil || len(c.Signers) != 1 || c.Signers[0].AccessURL == "" {
		t.Fatalf("contract %s: %v", r.body, err)
	}
	f.contractID, f.signURL = c.ID, c.Signers[0].AccessURL
	r = hostileDo(t, "POST", f.g.Site+"/webapi/share", hostileJSON(t, map[string]any{
		"type": "ISSUE", "issueId": "10001", "projectId": "10000", "password": "s3cret",
		"expirationExpression": map[string]any{"days": 30}, "customFields": []map[string]any{{"id": "summary"}},
	}), "Authorization", "Bearer "+f.shareKey, "Content-Type", "application/json")
	if r.status != 201 {
		t.Fatalf("creating a share: %d %s", r.status, r.body)
	}
	var sh struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(r.body, &sh); err != nil || sh.URL == "" {
		t.Fatalf("share %s: %v", r.body, err)
	}
	f.shareURL = sh.URL
	return f
}

// Every HTML page and every problem body, of each module, the key check
// and the admin API, and the catch-all, carries nosniff, refuses framing
// and is not cached.
func TestHostileSecurityHeaders(t *testing.T) {
	f := hostileStart(t, gatewayproc.Options{})
	site, admin := f.g.Site, f.g.Admin
	auth := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	jsonCT := []string{"Content-Type", "application/json"}
	unknownSign := site + "/sign/" + strings.Repeat("A", 43)
	tests := []struct {
		name, method, url string
		body              string
		header            []string
		status            int
		contentType       string
	}{
		{"contracts 401 missing key", "GET", site + "/webapi/contracts", "", nil, 401, "application/problem+json"},
		{"contracts 401 invalid key", "GET", site + "/webapi/contracts", "", auth("kg_nope"), 401, "application/problem+json"},
		{"contracts 403 missing privilege", "DELETE", site + "/webapi/contracts/" + f.contractID, "", auth(f.weakKey), 403, "application/problem+json"},
		{"contracts 404", "GET", site + "/webapi/contracts/00000000-0000-4000-8000-000000000000", "", auth(f.contractKey), 404, "application/problem+json"},
		{"contracts 400", "POST", site + "/webapi/contracts", `{}`, append(auth(f.contractKey), jsonCT...), 400, "application/problem+json"},
		{"contracts JSON reply", "GET", site + "/webapi/contracts/" + f.contractID, "", auth(f.contractKey), 200, "application/json"},
		{"share 401", "GET", site + "/webapi/share?projectId=10000", "", nil, 401, "application/problem+json"},
		{"share 400", "POST", site + "/webapi/share", `{}`, append(auth(f.shareKey), jsonCT...), 400, "application/problem+json"},
		{"share JSON reply", "GET", site + "/webapi/share?projectId=10000", "", auth(f.shareKey), 200, "application/json"},
		{"signing page", "GET", f.signURL, "", nil, 200, "text/html; charset=utf-8"},
		{"signing page of an unknown link", "GET", unknownSign, "", nil, 404, "text/html; charset=utf-8"},
		{"signing JSON view", "GET", f.signURL, "", []string{"Accept", "application/json"}, 200, "application/json"},
		{"signing problem", "POST", unknownSign + "/otp", "", []string{"Accept", "application/json"}, 404, "application/problem+json"},
		{"signing 415", "POST", f.signURL + "/decision", "x", []string{"Content-Type", "text/plain"}, 415, "application/problem+json"},
		{"share page, locked", "GET", f.shareURL, "", nil, 200, "text/html; charset=utf-8"},
		{"share page, unknown", "GET", site + "/s/00000000-0000-4000-8000-000000000000", "", nil, 404, "text/html; charset=utf-8"},
		{"share page JSON, locked", "GET", f.shareURL, "", []string{"Accept", "application/json"}, 401, "application/problem+json"},
		{"share unlock, wrong password", "POST", f.shareURL + "/unlock", `{"password":"nope"}`, jsonCT, 401, "application/problem+json"},
		{"share unlock, right password", "POST", f.shareURL + "/unlock", "password=s3cret", []string{"Content-Type", "application/x-www-form-urlencoded"}, 303, ""},
		{"catch-all 404", "GET", site + "/nothing/here", "", nil, 404, "application/problem+json"},
		{"admin JSON reply", "GET", admin + "/webapi/keys", "", nil, 200, "application/json"},
		{"admin 404", "GET", admin + "/webapi/keys/nope", "", nil, 404, "application/problem+json"},
		{"admin 400", "POST", admin + "/webapi/keys", `{}`, jsonCT, 400, "application/problem+json"},
		{"admin 405", "PATCH", admin + "/webapi/keys", `{}`, jsonCT, 405, "application/problem+json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			r := hostileDo(t, tc.method, tc.url, body, tc.header...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d; body %.300s", r.status, tc.status, r.body)
			}
			if tc.contentType != "" && r.header.Get("Content-Type") != tc.contentType {
				t.Errorf("Content-Type %q, want %q", r.header.Get("Content-Type"), tc.contentType)
			}
			if got := r.header.Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q", got)
			}
			if got := r.header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control %q", got)
			}
			if xfo, csp := r.header.Get("X-Frame-Options"), r.header.Get("Content-Security-Policy"); xfo != "DENY" || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("X-Frame-Options %q, Content-Security-Policy %q", xfo, csp)
			}
		})
	}
}

// Bodies that are too big, too deep, not UTF-8 or with a repeated key are a
// clear 4xx problem on both APIs and the admin API, and nothing is stored.
func TestHostileBodies(t *testing.T) {
	f := hostileStart(t, gatewayproc.Options{})
	site, admin := f.g.Site, f.g.Admin
	big := func(prefix string) string { return prefix + `"` + strings.Repeat("a", 1<<20) + `"}` }
	deep := func(prefix string) string {
		return prefix + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`
	}
	endpoints := []struct {
		name, url, token string
		// field is a body that would be stored, up to the value of its
		// last field, which each case completes with something hostile.
		field string
	}{
		{"contracts", site + "/webapi/contracts", f.contractKey, `{"templateId":"PAGE-1","signers":[{"fullName":"Bob","accessKind":"url"}],"name":`},
		{"share", site + "/webapi/share", f.shareKey, `{"type":"ISSUE","issueId":"10002","projectId":"10000","expirationExpression":{"days":1},"customFields":[],"password":`},
		{"admin keys", admin + "/webapi/keys", "", `{"service":"share","owner":"mallory","privileges":["get"],"name":`},
		{"admin templates", admin + "/webapi/templates", "", `{"id":"EVIL","collectionId":"C","body":"b","title":`},
	}
	for _, ep := range endpoints {
		cases := []struct {
			name, body string
			status     int
			code       string
		}{
			{"over 1 MiB", big(ep.field), 413, "payload_too_large"},
			{"nested 5000 deep", deep(ep.field), 400, "invalid_request"},
			{"invalid UTF-8", ep.field + "\"evil\xff\xfe\"}", 400, "invalid_request"},
			{"duplicate key", ep.field + `"a","name":"b","title":"c","password":"d"}`, 400, "invalid_request"},
		}
		for _, tc := range cases {
			t.Run(ep.name+"/"+tc.name, func(t *testing.T) {
				h := []string{"Content-Type", "application/json"}
				if ep.token != "" {
					h = append(h, "Authorization", "Bearer "+ep.token)
				}
				r := hostileDo(t, "POST", ep.url, []byte(tc.body), h...)
				if r.status != tc.status {
					t.Fatalf("status %d, want %d; body %.300s", r.status, tc.status, r.body)
				}
				if code := r.problemCode(t); code != tc.code {
					t.Fatalf("code %s, want %s", code, tc.code)
				}
			})
		}
	}
	// Nothing of the above was stored: still one contract, one share, three
	// keys and one template.
	counts := []struct {
		url, token string
		want       int
	}{
		{site + "/webapi/contracts", f.contractKey, 1},
		{site + "/webapi/share?projectId=10000", f.shareKey, 1},
		{admin + "/webapi/keys", "", 3},
		{admin + "/webapi/templates", "", 1},
	}
	for _, c := range counts {
		var h []string
		if c.token != "" {
			h = []string{"Authorization", "Bearer " + c.token}
		}
		r := hostileDo(t, "GET", c.url, nil, h...)
		if n := hostileCount(t, r.body); r.status != 200 || n != c.want {
			t.Errorf("GET %s: %d, %d items, want %d: %.300s", c.url, r.status, n, c.want, r.body)
		}
	}

	// A long query string is a 400 problem from the API, not a crash or a
	// plain-text error; one too long for the server's header limit is a
	// 4xx all the same.
	r := hostileDo(t, "GET", site+"/webapi/contracts?substring="+strings.Repeat("a", 16<<10), nil, "Authorization", "Bearer "+f.contractKey)
	if r.status != 400 || r.problemCode(t) != "invalid_request" {
		t.Errorf("16 KiB query: %d %.300s", r.status, r.body)
	}
	// Invalid UTF-8, control characters, repeated or unknown parameters in
	// a query are a 400 problem.
	for _, q := range []struct{ url, token string }{
		{site + "/webapi/contracts?substring=%FF%FE", f.contractKey},
		{site + "/webapi/contracts?templateId=a%0D%0Ab", f.contractKey},
		{site + "/webapi/share?projectId=%FF", f.shareKey},
		{site + "/webapi/share?projectId=10000&projectId=10001", f.shareKey},
		{admin + "/webapi/keys?service=%FF", ""},
		{admin + "/webapi/keys?service=share%0D%0A", ""},
		{admin + "/webapi/keys?" + strings.Repeat("x", 16<<10) + "=1", ""},
	} {
		var h []string
		if q.token != "" {
			h = []string{"Authorization", "Bearer " + q.token}
		}
		r := hostileDo(t, "GET", q.url, nil, h...)
		if r.status != 400 || r.problemCode(t) != "invalid_request" {
			t.Errorf("GET %s: %d %.300s", q.url, r.status, r.body)
		}
	}
	r = hostileDo(t, "GET", site+"/webapi/contracts?substring="+strings.Repeat("a", 2<<20), nil, "Authorization", "Bearer "+f.contractKey)
	if r.status/100 != 4 {
		t.Errorf("2 MiB query: %d %.300s", r.status, r.body)
	}
}

// hostileCount is the number of items of a list reply: a bare array, or
// an object with one array field.
func hostileCount(t *testing.T, body []byte) int {
	t.Helper()
	var list []json.RawMessage
	if json.Unmarshal(body, &list) == nil {
		return len(list)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		t.Fatalf("list reply %.300s: %v", body, err)
	}
	for _, v := range obj {
		if json.Unmarshal(v, &list) == nil {
			return len(list)
		}
	}
	t.Fatalf("no list in %.300s", body)
	return 0
}

// A client that trickles its request header or body is cut off by
// read_header or read_body; the timeouts are the servers global option of
// the default Caddyfile (TestDefaultCaddyfileTimeouts in caddymodule checks
// it keeps them), here shortened so the test is quick.
func TestHostileSlowClient(t *testing.T) {
	g := start(t, gatewayproc.Options{Site: hostileDefaultSite(t), Global: `servers {
		timeouts {
			read_header 1s
			read_body 2s
			write 5s
			idle 5s
		}
	}`})
	k, err := g.CreateKey("contracts", "slow", "alice", []string{"create"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body := `{"templateId":"PAGE-1","name":"` + strings.Repeat("n", 40) + `","signers":[]}`
	tests := []struct {
		name string
		// sent is written at once, trickled one byte every 200 ms: 12 s
		// or more, far beyond either timeout.
		sent, trickled string
	}{
		{"header", "", "GET /nothing HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aaaaaaaaaaaa\r\n\r\n"},
		{"body", "POST /webapi/contracts HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " + k.Token +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n", body},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(g.Site, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var reply bytes.Buffer
			closed := make(chan struct{})
			go func() {
				_, _ = io.Copy(&reply, conn) // returns when the server closes
				close(closed)
			}()
			if _, err := conn.Write([]byte(tc.sent)); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(tc.trickled); i++ {
				select {
				case <-closed:
				case <-time.After(200 * time.Millisecond):
					if _, err := conn.Write([]byte{tc.trickled[i]}); err == nil {
						continue
					}
					<-closed
				}
				// Cut off before the request was complete; whatever was
				// answered is no success.
				if strings.HasPrefix(reply.String(), "HTTP/1.1 2") {
					t.Fatalf("a trickled request succeeded: %.200s", reply.String())
				}
				return
			}
			t.Fatalf("the server waited for a %s trickled over %d s", tc.name, len(tc.trickled)/5)
		})
	}
}
