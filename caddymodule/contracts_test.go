package caddymodule_test

// Integration tests of the Contract Signing API through the real stack:
// Caddy in-process, webapi_auth contracts, webapi_contracts, the bbolt
// store. The upstreams/contracts unit tests cover every rule's edge cases;
// these prove that each rule holds as a client of the gateway sees it.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/testkit/openapitest"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// kgSend sends body as it is, with contentType when not empty, through
// client (nil: http.DefaultClient). do always sends JSON; this is for the
// requests that must not.
func kgSend(t *testing.T, client *http.Client, method, u, contentType string, body []byte, header ...string) response {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(openapitest.WithTB(context.Background(), t), method, u, rd)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}

// kgObject decodes a JSON object reply into a map, so that tests can tell
// an absent member from a null or empty one.
func kgObject(t *testing.T, r response) map[string]any {
	t.Helper()
	var m map[string]any
	r.json(t, &m)
	return m
}

// kgFieldCodes lists a problem's errors as sorted "field:code" pairs, and
// checks that each has a message.
func kgFieldCodes(t *testing.T, p problem.Details) []string {
	t.Helper()
	out := problemtest.FieldCodes(t, &p)
	sort.Strings(out)
	return out
}

// kgWantProblem checks status, the problem body and its code, and returns it.
func kgWantProblem(t *testing.T, r response, status int, code string) problem.Details {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	p := r.problem(t)
	if p.Code != code || p.Detail == "" {
		t.Fatalf("problem %+v, want code %s with a detail", p, code)
	}
	return p
}

// ctrContract is the Contract Object as a client decodes it.
type ctrContract struct {
	ID                  string
	TemplateID          string
	TemplateSource      string
	CollectionID        string
	Name                string
	CreatedByID         string
	CreationTimestamp   string
	ExpirationTimestamp string
	SequentialSigning   bool
	ArchivalTimestamp   string
	Status              string
	Signers             []ctrSigner
	Watchers            []map[string]string
}

type ctrSigner struct {
	ID                        string
	FullName                  string
	AccessKind                string
	Email                     string
	Phone                     string
	OTPMethod                 string
	SigningMethods            []string `json:"signerSigningMethods"`
	AppendSignatureMacro      bool
	ReceivesCompletedContract bool
	AccessURL                 string
}

type ctrPage struct {
	TotalCount int
	Contracts  []ctrContract
}

var (
	ctrTimestamp = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	ctrUUID      = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
)

const ctrURL = "/webapi/contracts"

// ctrSetup starts a gateway with the default routing and registers two
// templates through the admin API.
func ctrSetup(t *testing.T, b backend) *gateway {
	t.Helper()
	g := startGateway(t, b, defaultSite)
	for _, tpl := range []map[string]any{
		{"id": "TPL-1", "collectionId": "SPACE-A", "title": "Mutual NDA", "body": "Both parties keep it secret."},
		{"id": "TPL-2", "collectionId": "SPACE-B", "title": "Supply agreement", "body": "Goods against money."},
	} {
		if r := do(t, "POST", adminURL+"/webapi/templates", tpl); r.status != http.StatusCreated {
			t.Fatalf("registering template: %d %s", r.status, r.body)
		}
	}
	return g
}

// ctrKey makes a contracts key of owner with privileges.
func ctrKey(t *testing.T, owner string, privileges ...string) string {
	t.Helper()
	return createKey(t, map[string]any{"service": "contracts", "name": owner + " " + strings.Join(privileges, ","),
		"owner": owner, "privileges": privileges}).Token
}

var ctrAllPrivileges = []string{"get", "search", "create", "archive", "delete"}

// ctrSimple is a valid create body with one url signer.
func ctrSimple(template, name string, signers ...map[string]any) map[string]any {
	if len(signers) == 0 {
		signers = []map[string]any{{"fullName": "Ursula Url", "accessKind": "url"}}
	}
	return map[string]any{"templateId": template, "name": name, "signers": signers}
}

// ctrCreate creates a contract and decodes it.
func ctrCreate(t *testing.T, token string, body any) ctrContract {
	t.Helper()
	r := do(t, "POST", siteURL+ctrURL, body, bearer(token)...)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var c ctrContract
	r.json(t, &c)
	return c
}

// ctrSearch runs a search and decodes the page.
func ctrSearch(t *testing.T, token, query string) (ctrPage, response) {
	t.Helper()
	r := do(t, "GET", siteURL+ctrURL+"?"+query, nil, bearer(token)...)
	if r.status != http.StatusOK {
		t.Fatalf("search %s: %d %s", query, r.status, r.body)
	}
	var p ctrPage
	r.json(t, &p)
	return p, r
}

func ctrIDs(cs []ctrContract) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

func TestContractsCreate(t *testing.T) { eachBackend(t, testContractsCreate) }

func testContractsCreate(t *testing.T, b backend) {
	ctrSetup(t, b)
	alice := ctrKey(t, "alice", ctrAllPrivileges...)
	countAll := func() int {
		p, _ := ctrSearch(t, alice, "placement=any&statuses=any")
		return p.TotalCount
	}

	t.Run("created with defaults, Location, signers with links, watchers", func(t *testing.T) {
		expires := time.Now().UTC().Add(48 * time.Hour).Truncate(time.Millisecond)
		body := map[string]any{
			"templateId": "TPL-1", "name": "Mutual NDA with Ünïcode", "sequentialSigning": true,
			"signers": []map[string]any{
				{"fullName": "Erika Email", "accessKind": "email", "email": "erika@example.com"},
				{"fullName": "Ursula Url", "accessKind": "url", "otpMethod": "none", "signerSigningMethods": []string{"draw"},
					"appendSignatureMacro": true, "receivesCompletedContract": false},
			},
			"watchers":            []map[string]any{{"name": "Walter Watcher", "email": "walter@example.com", "notificationKinds": "created|signed|completed-contract"}},
			"expirationTimestamp": expires.Format(time.RFC3339Nano),
		}
		r := do(t, "POST", siteURL+ctrURL, body, bearer(alice)...)
		if r.status != http.StatusCreated {
			t.Fatalf("%d %s", r.status, r.body)
		}
		var c ctrContract
		r.json(t, &c)
		if !ctrUUID.MatchString(c.ID) {
			t.Fatalf("id %q is not a UUID", c.ID)
		}
		if loc := r.header.Get("Location"); loc != ctrURL+"/"+c.ID {
			t.Errorf("Location %q, want %s/%s", loc, ctrURL, c.ID)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if cc := r.header.Get("Cache-Control"); cc != "no-store" {
			t.Errorf("Cache-Control %q: replies carry personal data", cc)
		}
		if c.TemplateID != "TPL-1" || c.CollectionID != "SPACE-A" || c.Name != "Mutual NDA with Ünïcode" ||
			c.CreatedByID != "alice" || !c.SequentialSigning || c.Status != "sent" || c.ArchivalTimestamp != "" {
			t.Errorf("contract %+v", c)
		}
		if !ctrTimestamp.MatchString(c.CreationTimestamp) || c.ExpirationTimestamp != expires.Format("2006-01-02T15:04:05.000Z") {
			t.Errorf("timestamps %q %q, want expiration %s", c.CreationTimestamp, c.ExpirationTimestamp, expires)
		}
		if len(c.Signers) != 2 {
			t.Fatalf("signers %+v", c.Signers)
		}
		e, u := c.Signers[0], c.Signers[1]
		if e.FullName != "Erika Email" || e.AccessKind != "email" || e.Email != "erika@example.com" || e.OTPMethod != "email" ||
			!slices.Equal(e.SigningMethods, []string{"upload", "render", "draw"}) || e.AppendSignatureMacro || !e.ReceivesCompletedContract {
			t.Errorf("email signer with defaults: %+v", e)
		}
		if u.AccessKind != "url" || u.Email != "" || u.OTPMethod != "none" || !slices.Equal(u.SigningMethods, []string{"draw"}) ||
			!u.AppendSignatureMacro || u.ReceivesCompletedContract {
			t.Errorf("url signer: %+v", u)
		}
		link := regexp.MustCompile(`^` + regexp.QuoteMeta(siteURL) + `/sign/[A-Za-z0-9_-]{43}$`)
		for _, s := range c.Signers {
			if !ctrUUID.MatchString(s.ID) || !link.MatchString(s.AccessURL) {
				t.Errorf("signer id %q accessUrl %q", s.ID, s.AccessURL)
			}
		}
		if e.AccessURL == u.AccessURL || e.ID == u.ID {
			t.Errorf("two signers share a link or an id")
		}
		wantWatchers := []map[string]string{{"name": "Walter Watcher", "email": "walter@example.com", "notificationKinds": "created|signed|completed-contract"}}
		if !reflect.DeepEqual(c.Watchers, wantWatchers) {
			t.Errorf("watchers %v", c.Watchers)
		}
		// Absent values are left out, not null.
		raw := kgObject(t, r)
		for _, k := range []string{"archivalTimestamp", "finalizedPdf", "certificatePdf"} {
			if _, ok := raw[k]; ok {
				t.Errorf("reply holds %s: %s", k, r.body)
			}
		}
		for i, s := range raw["signers"].([]any) {
			sm := s.(map[string]any)
			for _, k := range []string{"phone", "openedTimestamp", "decision", "decisionTimestamp", "decisionIp", "tokenHash", "sealedToken"} {
				if _, ok := sm[k]; ok {
					t.Errorf("signer %d holds %s", i, k)
				}
			}
		}
		if _, ok := raw["signers"].([]any)[1].(map[string]any)["email"]; ok {
			t.Errorf("url signer without e-mail shows an email member")
		}

		// What was stored is what the creator reads back.
		got := do(t, "GET", siteURL+ctrURL+"/"+c.ID, nil, bearer(alice)...)
		if got.status != 200 || !reflect.DeepEqual(kgObject(t, got), raw) {
			t.Errorf("get after create: %d %s\nwant %s", got.status, got.body, r.body)
		}
	})

	t.Run("default expiration is contract_validity after creation", func(t *testing.T) {
		c := ctrCreate(t, alice, ctrSimple("TPL-2", "Default expiry"))
		created, err1 := time.Parse(time.RFC3339, c.CreationTimestamp)
		expires, err2 := time.Parse(time.RFC3339, c.ExpirationTimestamp)
		if err1 != nil || err2 != nil || expires.Sub(created) != 168*time.Hour {
			t.Errorf("created %s expires %s, want 168h later", c.CreationTimestamp, c.ExpirationTimestamp)
		}
		if c.CollectionID != "SPACE-B" || c.Signers[0].OTPMethod != "none" || c.SequentialSigning || c.Watchers != nil {
			t.Errorf("%+v", c)
		}
	})

	signer := func(i int) map[string]any {
		return map[string]any{"fullName": fmt.Sprintf("Signer %d", i), "accessKind": "email", "email": fmt.Sprintf("s%d@example.com", i)}
	}
	signers := func(n int) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = signer(i)
		}
		return out
	}

	t.Run("26 signers accepted", func(t *testing.T) {
		c := ctrCreate(t, alice, map[string]any{"templateId": "TPL-1", "name": "Many", "signers": signers(26)})
		if len(c.Signers) != 26 || c.Signers[25].Email != "s25@example.com" {
			t.Errorf("%d signers", len(c.Signers))
		}
	})

	many := map[string]any{
		"templateId": "",
		"name":       "   ",
		"signers": []map[string]any{
			{"fullName": "", "accessKind": "fax"},
			{"fullName": "Bad Address", "accessKind": "url", "email": "Bob <bob@example.com>"},
			{"fullName": "Needs a phone", "accessKind": "email", "email": "p@example.com", "otpMethod": "sms"},
			{"fullName": "No Email", "accessKind": "email"},
			{"fullName": "Phone", "accessKind": "url", "phone": "+41446681800", "signerSigningMethods": []string{"draw", "draw"}},
			{"fullName": "Bad phone", "accessKind": "url", "phone": "0041446681800", "otpMethod": "carrier pigeon"},
		},
		"watchers":            []map[string]any{{"name": "", "email": "not-an-address", "notificationKinds": "created|created"}},
		"expirationTimestamp": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339),
	}
	watchers51 := make([]map[string]any, 51)
	for i := range watchers51 {
		watchers51[i] = map[string]any{"name": "W", "email": "w@example.com", "notificationKinds": "created"}
	}
	big := `{"templateId":"TPL-1","name":"` + strings.Repeat("x", 1<<20) + `","signers":[]}`

	tests := []struct {
		name        string
		contentType string
		body        any
		status      int
		code        string
		fields      []string
	}{
		{name: "every violation listed at once", body: many, status: 400, code: "invalid_request", fields: []string{
			"expirationTimestamp:invalid", "name:invalid",
			"signers[0].accessKind:invalid", "signers[0].fullName:required",
			"signers[1].email:invalid",
			"signers[2].otpMethod:invalid",
			"signers[3].email:required",
			"signers[4].phone:sms_not_configured", "signers[4].signerSigningMethods:invalid",
			"signers[5].otpMethod:invalid", "signers[5].phone:invalid",
			"templateId:required",
			"watchers[0].email:invalid", "watchers[0].name:required", "watchers[0].notificationKinds:invalid",
		}},
		{name: "unknown template", body: ctrSimple("NO-SUCH-PAGE", "x"), status: 400, code: "invalid_request", fields: []string{"templateId:unknown_template"}},
		{name: "27 signers refused", body: map[string]any{"templateId": "TPL-1", "name": "Too many", "signers": signers(27)},
			status: 400, code: "invalid_request", fields: []string{"signers:too_many"}},
		{name: "no signers", body: map[string]any{"templateId": "TPL-1", "name": "None", "signers": []any{}},
			status: 400, code: "invalid_request", fields: []string{"signers:required"}},
		{name: "51 watchers refused", body: map[string]any{"templateId": "TPL-1", "name": "W", "signers": signers(1), "watchers": watchers51},
			status: 400, code: "invalid_request", fields: []string{"watchers:too_many"}},
		{name: "expiration more than 365 days ahead", body: map[string]any{"templateId": "TPL-1", "name": "Far", "signers": signers(1),
			"expirationTimestamp": time.Now().Add(366 * 24 * time.Hour).UTC().Format(time.RFC3339)},
			status: 400, code: "invalid_request", fields: []string{"expirationTimestamp:invalid"}},
		{name: "unknown field", body: map[string]any{"templateId": "TPL-1", "name": "U", "signers": signers(1), "color": "red"},
			status: 400, code: "invalid_request", fields: []string{"color:unknown_field"}},
		{name: "wrong JSON type", body: `{"templateId":"TPL-1","name":"T","signers":[{"fullName":"A","accessKind":"url","appendSignatureMacro":"yes"}]}`,
			status: 400, code: "invalid_request", fields: []string{"signers.appendSignatureMacro:invalid_type"}},
		{name: "malformed JSON", body: `{"templateId":`, status: 400, code: "invalid_request"},
		{name: "two JSON values", body: `{} {}`, status: 400, code: "invalid_request"},
		{name: "text/plain", contentType: "text/plain", body: ctrSimple("TPL-1", "plain"), status: 415, code: "unsupported_media_type"},
		{name: "form", contentType: "application/x-www-form-urlencoded", body: "templateId=TPL-1", status: 415, code: "unsupported_media_type"},
		{name: "no Content-Type", contentType: "-", body: ctrSimple("TPL-1", "none"), status: 415, code: "unsupported_media_type"},
		{name: "over 1 MiB", body: big, status: 413, code: "payload_too_large"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := countAll()
			var raw []byte
			switch b := tc.body.(type) {
			case string:
				raw = []byte(b)
			default:
				var err error
				if raw, err = json.Marshal(b); err != nil {
					t.Fatal(err)
				}
			}
			ct := "application/json"
			switch tc.contentType {
			case "":
			case "-":
				ct = ""
			default:
				ct = tc.contentType
			}
			r := kgSend(t, nil, "POST", siteURL+ctrURL, ct, raw, bearer(alice)...)
			p := kgWantProblem(t, r, tc.status, tc.code)
			if got := kgFieldCodes(t, p); tc.fields != nil && !slices.Equal(got, tc.fields) {
				t.Errorf("fields\n got %v\nwant %v", got, tc.fields)
			}
			if tc.fields != nil && p.Detail != fmt.Sprintf("%d fields are invalid", len(tc.fields)) && len(tc.fields) > 1 {
				t.Errorf("detail %q", p.Detail)
			}
			if r.header.Get("Location") != "" {
				t.Errorf("a refused create has a Location")
			}
			if after := countAll(); after != before {
				t.Errorf("a refused create stored something: %d contracts, were %d", after, before)
			}
		})
	}
}

func TestContractsGetArchiveDelete(t *testing.T) { eachBackend(t, testContractsGetArchiveDelete) }

func testContractsGetArchiveDelete(t *testing.T, b backend) {
	ctrSetup(t, b)
	alice := ctrKey(t, "alice", ctrAllPrivileges...)
	bob := ctrKey(t, "bob", ctrAllPrivileges...)
	c := ctrCreate(t, alice, ctrSimple("TPL-1", "Lease", map[string]any{"fullName": "Erika", "accessKind": "email", "email": "erika@example.com"},
		map[string]any{"fullName": "Ursula", "accessKind": "url"}))
	path := siteURL + ctrURL + "/" + c.ID

	t.Run("get", func(t *testing.T) {
		tests := []struct {
			name      string
			token     string
			url       string
			status    int
			accessURL bool
		}{
			{"creator sees the signing links", alice, path, 200, true},
			{"another owner's key sees no signing link", bob, path, 200, false},
			{"unknown id", alice, siteURL + ctrURL + "/0190c1a2-7b3c-7d4e-8f50-617283940a1b", 404, false},
			{"malformed id", alice, siteURL + ctrURL + "/not-a-uuid", 404, false},
			{"id with a trailing character", alice, path + "x", 404, false},
			{"attachment of a contract not signed", alice, path + "/attachments/whatever", 404, false},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				r := do(t, "GET", tc.url, nil, bearer(tc.token)...)
				if tc.status != 200 {
					kgWantProblem(t, r, tc.status, "not_found")
					return
				}
				if r.status != 200 {
					t.Fatalf("%d %s", r.status, r.body)
				}
				var got ctrContract
				r.json(t, &got)
				if got.ID != c.ID || got.CreatedByID != "alice" || got.Name != "Lease" || len(got.Signers) != 2 ||
					got.Signers[0].Email != "erika@example.com" || got.Signers[0].FullName != "Erika" || got.Signers[1].OTPMethod != "none" {
					t.Errorf("%s", r.body)
				}
				for i, s := range got.Signers {
					if (s.AccessURL != "") != tc.accessURL {
						t.Errorf("signer %d accessUrl %q, want present=%v", i, s.AccessURL, tc.accessURL)
					}
					if tc.accessURL && s.AccessURL != c.Signers[i].AccessURL {
						t.Errorf("signer %d link changed: %q, was %q", i, s.AccessURL, c.Signers[i].AccessURL)
					}
				}
				if !tc.accessURL && strings.Contains(string(r.body), "/sign/") {
					t.Errorf("a signing link leaks to another owner: %s", r.body)
				}
			})
		}
	})

	t.Run("archive with a body is refused and changes nothing", func(t *testing.T) {
		r := kgSend(t, nil, "PATCH", path, "application/json", []byte(`{}`), bearer(alice)...)
		kgWantProblem(t, r, 400, "invalid_request")
		var got ctrContract
		do(t, "GET", path, nil, bearer(alice)...).json(t, &got)
		if got.ArchivalTimestamp != "" {
			t.Errorf("archived by a refused request: %s", got.ArchivalTimestamp)
		}
	})

	t.Run("archive twice keeps the first time", func(t *testing.T) {
		if p, _ := ctrSearch(t, alice, "placement=archived"); p.TotalCount != 0 {
			t.Fatalf("archived before archiving: %+v", p)
		}
		r := do(t, "PATCH", path, nil, bearer(alice)...)
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("archive: %d %q", r.status, r.body)
		}
		var first ctrContract
		do(t, "GET", path, nil, bearer(alice)...).json(t, &first)
		if !ctrTimestamp.MatchString(first.ArchivalTimestamp) || first.Status != "sent" {
			t.Fatalf("after archive: %+v", first)
		}
		time.Sleep(5 * time.Millisecond) // a second archive falls on another millisecond
		if r := do(t, "PATCH", path, nil, bearer(bob)...); r.status != http.StatusNoContent {
			t.Fatalf("archive again: %d %s", r.status, r.body)
		}
		var second ctrContract
		do(t, "GET", path, nil, bearer(alice)...).json(t, &second)
		if second.ArchivalTimestamp != first.ArchivalTimestamp {
			t.Errorf("archivalTimestamp moved from %s to %s", first.ArchivalTimestamp, second.ArchivalTimestamp)
		}
		if p, _ := ctrSearch(t, alice, "placement=archived"); p.TotalCount != 1 || len(p.Contracts) != 1 || p.Contracts[0].ID != c.ID ||
			p.Contracts[0].ArchivalTimestamp != first.ArchivalTimestamp {
			t.Errorf("archived search: %+v", p)
		}
		if p, _ := ctrSearch(t, alice, ""); p.TotalCount != 0 {
			t.Errorf("the default (stacked) search still finds the archived contract: %+v", p)
		}
		kgWantProblem(t, do(t, "PATCH", siteURL+ctrURL+"/0190c1a2-7b3c-7d4e-8f50-617283940a1b", nil, bearer(alice)...), 404, "not_found")
	})

	t.Run("delete, then it is gone", func(t *testing.T) {
		other := ctrCreate(t, bob, ctrSimple("TPL-2", "Stays"))
		r := do(t, "DELETE", path, nil, bearer(alice)...)
		if r.status != http.StatusNoContent || len(r.body) != 0 {
			t.Fatalf("delete: %d %q", r.status, r.body)
		}
		kgWantProblem(t, do(t, "GET", path, nil, bearer(alice)...), 404, "not_found")
		kgWantProblem(t, do(t, "DELETE", path, nil, bearer(alice)...), 404, "not_found")
		kgWantProblem(t, do(t, "PATCH", path, nil, bearer(alice)...), 404, "not_found")
		p, _ := ctrSearch(t, alice, "placement=any")
		if p.TotalCount != 1 || len(p.Contracts) != 1 || p.Contracts[0].ID != other.ID {
			t.Errorf("search after delete: %+v", p)
		}
		if r := do(t, "GET", siteURL+ctrURL+"/"+other.ID, nil, bearer(bob)...); r.status != 200 {
			t.Errorf("the other contract: %d", r.status)
		}
	})
}

func TestContractsSearch(t *testing.T) { eachBackend(t, testContractsSearch) }

func testContractsSearch(t *testing.T, b backend) {
	ctrSetup(t, b)
	alice := ctrKey(t, "alice", ctrAllPrivileges...)
	bob := ctrKey(t, "bob", ctrAllPrivileges...)
	email := func(name, addr string) map[string]any {
		return map[string]any{"fullName": name, "accessKind": "email", "email": addr}
	}
	created := []ctrContract{
		ctrCreate(t, alice, ctrSimple("TPL-1", "alpha lease", email("Zoë Äpfel", "zoe@example.com"))),
		ctrCreate(t, alice, ctrSimple("TPL-2", "Beta NDA")),
		ctrCreate(t, bob, ctrSimple("TPL-1", "gamma Straße", email("Max Muster", "max.GRUEN@example.org"))),
		ctrCreate(t, bob, ctrSimple("TPL-2", "Delta supply")),
		ctrCreate(t, alice, ctrSimple("TPL-1", "epsilon")),
	}
	archived := created[3]
	if r := do(t, "PATCH", siteURL+ctrURL+"/"+archived.ID, nil, bearer(bob)...); r.status != 204 {
		t.Fatalf("archive: %d", r.status)
	}
	stacked := []string{created[0].ID, created[1].ID, created[2].ID, created[4].ID}
	all := ctrIDs(created)

	// A contract that expires while the test runs shows expired in reads
	// and in status searches from its expirationTimestamp on (far enough
	// ahead for the create to land before it on a slow machine).
	expiring := ctrCreate(t, alice, map[string]any{"templateId": "TPL-2", "name": "zeta short-lived",
		"signers":             []map[string]any{{"fullName": "Ursula", "accessKind": "url"}},
		"expirationTimestamp": time.Now().UTC().Add(3 * time.Second).Format(time.RFC3339Nano)})
	testwait.For(t, testwait.Generous, "the contract to expire", func() bool {
		var c ctrContract
		do(t, "GET", siteURL+ctrURL+"/"+expiring.ID, nil, bearer(alice)...).json(t, &c)
		return c.Status == "expired"
	})

	set := func(ids ...string) []string {
		out := slices.Clone(ids)
		sort.Strings(out)
		return out
	}

	t.Run("filters", func(t *testing.T) {
		tests := []struct {
			name  string
			query string
			want  []string
		}{
			{"defaults: stacked, any status", "", set(append(stacked, expiring.ID)...)},
			{"template, creator, status and placement at once", "template-id=TPL-1&creator-id=alice&statuses=sent&placement=stacked", set(created[0].ID, created[4].ID)},
			{"template and creator", "template-id=TPL-2&creator-id=bob&placement=any", set(archived.ID)},
			{"placement archived", "placement=archived", set(archived.ID)},
			{"placement any", "placement=any", set(append(all, expiring.ID)...)},
			{"statuses sent|ongoing", "statuses=" + url.QueryEscape("sent|ongoing"), set(stacked...)},
			{"statuses expired", "statuses=expired", set(expiring.ID)},
			{"statuses any", "statuses=any&placement=any", set(append(all, expiring.ID)...)},
			{"statuses signed|rejected: nothing", "statuses=" + url.QueryEscape("signed|rejected"), nil},
			{"substring in the name, any case", "substring=BETA", set(created[1].ID)},
			{"substring with Unicode folding", "substring=STRASSE", set(created[2].ID)},
			{"substring in a signer's name", "substring=" + url.QueryEscape("zoË äp"), set(created[0].ID)},
			{"substring in a signer's e-mail", "substring=grueN%40", set(created[2].ID)},
			{"substring matching nothing", "substring=omega", nil},
			{"creator without contracts", "creator-id=carol", nil},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				q := tc.query
				if !strings.Contains(q, "page-size") {
					q += "&page-size=100"
				}
				p, r := ctrSearch(t, alice, strings.TrimPrefix(q, "&"))
				if got := set(ctrIDs(p.Contracts)...); p.TotalCount != len(tc.want) || !slices.Equal(got, set(tc.want...)) {
					t.Errorf("got %d %v, want %v", p.TotalCount, got, tc.want)
				}
				raw := kgObject(t, r)
				if _, has := raw["contracts"]; has != (len(tc.want) > 0) {
					t.Errorf("contracts member present=%v with %d matches: %s", has, len(tc.want), r.body)
				}
				list, _ := raw["contracts"].([]any)
				for _, c := range list {
					cm := c.(map[string]any)
					if _, ok := cm["signers"]; ok {
						t.Errorf("search shows signers")
					}
					if _, ok := cm["watchers"]; ok {
						t.Errorf("search shows watchers")
					}
				}
			})
		}
	})

	t.Run("date-range in a time zone", func(t *testing.T) {
		// The same instant falls on different dates in UTC+14 and UTC-12,
		// 26 hours apart; a date range means the dates of its zone.
		first := created[0]
		at, err := time.Parse(time.RFC3339, first.CreationTimestamp)
		if err != nil {
			t.Fatal(err)
		}
		east := at.In(time.FixedZone("", 14*3600)).Format(time.DateOnly)
		west := at.In(time.FixedZone("", -12*3600)).Format(time.DateOnly)
		dayBefore := func(d string) string {
			t0, _ := time.Parse(time.DateOnly, d)
			return t0.AddDate(0, 0, -1).Format(time.DateOnly)
		}
		tests := []struct {
			name, dateRange, zone string
			match                 bool
		}{
			{"the date in its zone", east, "UTC+14:00", true},
			{"the same date by IANA name", east, "Pacific/Kiritimati", true},
			{"that date in a zone where it is another day", east, "UTC-12:00", false},
			{"the western date in the west", west, "Etc/GMT+12", true},
			{"the western date in the east", west, "UTC+14:00", false},
			{"on or after", east + "~", "UTC+14:00", true},
			{"on or before the day before", "~" + dayBefore(east), "UTC+14:00", false},
			{"between, inclusive", west + "~" + east, "Z", true},
			{"UTC by default", at.UTC().Format(time.DateOnly), "", true},
			{"UTC by name", at.UTC().Format(time.DateOnly), "UTC", true},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				q := "placement=any&page-size=100&date-range=" + url.QueryEscape(tc.dateRange)
				if tc.zone != "" {
					q += "&time-zone=" + url.QueryEscape(tc.zone)
				}
				p, _ := ctrSearch(t, alice, q)
				if has := slices.Contains(ctrIDs(p.Contracts), first.ID); has != tc.match {
					t.Errorf("range %s in %q: match %v, want %v (%d found)", tc.dateRange, tc.zone, has, tc.match, p.TotalCount)
				}
			})
		}
	})

	t.Run("orders and pages", func(t *testing.T) {
		// Every contract, with what each order sorts by. Ties break by id,
		// ascending whatever the direction.
		everything := append(slices.Clone(created), expiring)
		sorted := func(less func(a, b ctrContract) int) []string {
			cs := slices.Clone(everything)
			slices.SortStableFunc(cs, func(a, b ctrContract) int {
				if c := less(a, b); c != 0 {
					return c
				}
				return strings.Compare(a.ID, b.ID)
			})
			return ctrIDs(cs)
		}
		byName := func(dir int) []string {
			return sorted(func(a, b ctrContract) int {
				return dir * strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
			})
		}
		byCreator := func(dir int) []string {
			return sorted(func(a, b ctrContract) int { return dir * strings.Compare(a.CreatedByID, b.CreatedByID) })
		}
		byDate := func(dir int) []string {
			return sorted(func(a, b ctrContract) int {
				return dir * strings.Compare(a.CreationTimestamp, b.CreationTimestamp)
			})
		}
		if got := byName(1); got[0] != created[0].ID || got[1] != created[1].ID {
			t.Fatalf("name order is not case-insensitive in the expectation: %v", got)
		}
		orders := map[string][]string{
			"creation-date-asc": byDate(1), "creation-date-desc": byDate(-1),
			"name-asc": byName(1), "name-desc": byName(-1),
			"creator-id-asc": byCreator(1), "creator-id-desc": byCreator(-1),
		}
		for order, want := range orders {
			t.Run(order, func(t *testing.T) {
				p, _ := ctrSearch(t, alice, "placement=any&order="+order)
				if got := ctrIDs(p.Contracts); !slices.Equal(got, want) || p.TotalCount != len(want) {
					t.Errorf("got %v\nwant %v", got, want)
				}
				p, _ = ctrSearch(t, alice, "placement=any&page-size=2&page=2&order="+order)
				if got := ctrIDs(p.Contracts); !slices.Equal(got, want[2:4]) || p.TotalCount != len(want) {
					t.Errorf("page 2 of 2: got %v, want %v", got, want[2:4])
				}
				p, _ = ctrSearch(t, alice, "placement=any&page-size=4&page=2&order="+order)
				if got := ctrIDs(p.Contracts); !slices.Equal(got, want[4:]) {
					t.Errorf("last page: got %v, want %v", got, want[4:])
				}
				p, r := ctrSearch(t, alice, "placement=any&page=3&page-size=4&order="+order)
				if p.TotalCount != len(want) || strings.Contains(string(r.body), `"contracts"`) {
					t.Errorf("page past the end: %s", r.body)
				}
			})
		}
		t.Run("random ignores page", func(t *testing.T) {
			for _, q := range []string{"placement=any&order=random&page-size=3", "placement=any&page=7&page-size=3"} {
				p, _ := ctrSearch(t, alice, q)
				ids := ctrIDs(p.Contracts)
				if p.TotalCount != len(everything) || len(ids) != 3 || len(set(ids...)) != 3 {
					t.Errorf("%s: %d total, page %v", q, p.TotalCount, ids)
				}
				for _, id := range ids {
					if !slices.Contains(ctrIDs(everything), id) {
						t.Errorf("unknown id %s", id)
					}
				}
			}
		})
		t.Run("default page size is 10, 100 is allowed", func(t *testing.T) {
			for _, q := range []string{"placement=any", "placement=any&page-size=100", "placement=any&page-size=1&page=6&order=name-asc"} {
				p, _ := ctrSearch(t, alice, q)
				if p.TotalCount != len(everything) || len(p.Contracts) == 0 {
					t.Errorf("%s: %+v", q, p)
				}
			}
		})
	})

	t.Run("bad parameters are listed together", func(t *testing.T) {
		tests := []struct {
			query  string
			fields []string
		}{
			{"page-size=101", []string{"page-size:invalid"}},
			{"page-size=0&page=0", []string{"page-size:invalid", "page:invalid"}},
			{"colour=red&statuses=done&order=up&placement=floor", []string{"colour:unknown_parameter", "order:invalid", "placement:invalid", "statuses:invalid"}},
			{"date-range=2026-02-30&time-zone=Mars%2FOlympus", []string{"date-range:invalid", "time-zone:invalid"}},
			{"date-range=2026-03-02~2026-03-01&time-zone=UTC%2B15:00", []string{"date-range:invalid", "time-zone:invalid"}},
			{"template-id=%C3%BC&substring=&page=-1", []string{"page:invalid", "substring:invalid", "template-id:invalid"}},
			{"order=name-asc&order=name-desc", []string{"order:repeated"}},
		}
		for _, tc := range tests {
			t.Run(tc.query, func(t *testing.T) {
				r := do(t, "GET", siteURL+ctrURL+"?"+tc.query, nil, bearer(bob)...)
				p := kgWantProblem(t, r, 400, "invalid_request")
				want := slices.Clone(tc.fields)
				sort.Strings(want)
				if got := kgFieldCodes(t, p); !slices.Equal(got, want) {
					t.Errorf("got %v, want %v", got, want)
				}
			})
		}
	})
}

func TestContractsPrivileges(t *testing.T) { eachBackend(t, testContractsPrivileges) }

func testContractsPrivileges(t *testing.T, b backend) {
	ctrSetup(t, b)
	full := ctrKey(t, "alice", ctrAllPrivileges...)
	c := ctrCreate(t, full, ctrSimple("TPL-1", "Guarded"))
	path := siteURL + ctrURL + "/" + c.ID
	shareKey := createKey(t, map[string]any{"service": "share", "name": "share", "owner": "alice",
		"privileges": []string{"get", "list", "create", "delete"}}).Token

	type call struct {
		method, url string
		body        any
	}
	calls := map[string]call{
		"get":     {"GET", path, nil},
		"search":  {"GET", siteURL + ctrURL + "?statuses=any", nil},
		"create":  {"POST", siteURL + ctrURL, ctrSimple("TPL-1", "Refused")},
		"archive": {"PATCH", path, nil},
		"delete":  {"DELETE", path, nil},
	}
	for _, missing := range ctrAllPrivileges {
		t.Run("without "+missing, func(t *testing.T) {
			var rest []string
			for _, p := range ctrAllPrivileges {
				if p != missing {
					rest = append(rest, p)
				}
			}
			key := ctrKey(t, "alice", rest...)
			cl := calls[missing]
			r := do(t, cl.method, cl.url, cl.body, bearer(key)...)
			kgWantProblem(t, r, 403, "missing_privilege")
			if got, want := r.header.Get("WWW-Authenticate"), `Bearer realm="webapi", error="insufficient_scope", scope="`+missing+`"`; got != want {
				t.Errorf("WWW-Authenticate %q, want %q", got, want)
			}
			// The key works for what it may do.
			if r := do(t, "GET", siteURL+ctrURL+"?placement=any", nil, bearer(key)...); missing != "search" && r.status != 200 {
				t.Errorf("search with the key: %d", r.status)
			}
			// The refused call changed nothing.
			var got ctrContract
			if r := do(t, "GET", path, nil, bearer(full)...); r.status != 200 {
				t.Fatalf("contract gone after a refused %s: %d", missing, r.status)
			} else {
				r.json(t, &got)
			}
			if got.ArchivalTimestamp != "" {
				t.Errorf("archived by a refused call")
			}
			if p, _ := ctrSearch(t, full, "placement=any"); p.TotalCount != 1 {
				t.Errorf("%d contracts after a refused %s", p.TotalCount, missing)
			}
		})
	}

	refusals := []struct {
		name, code, wwwAuth string
		header              []string
	}{
		{"a share key", "invalid_key", `Bearer realm="webapi", error="invalid_token"`, bearer(shareKey)},
		{"no key", "missing_key", `Bearer realm="webapi"`, nil},
	}
	for _, tc := range refusals {
		for op, cl := range calls {
			t.Run(tc.name+" on "+op, func(t *testing.T) {
				r := do(t, cl.method, cl.url, cl.body, tc.header...)
				kgWantProblem(t, r, 401, tc.code)
				if got := r.header.Get("WWW-Authenticate"); got != tc.wwwAuth {
					t.Errorf("WWW-Authenticate %q, want %q", got, tc.wwwAuth)
				}
			})
		}
	}
	if r := do(t, "GET", path, nil, bearer(full)...); r.status != 200 || strings.Contains(string(r.body), "archivalTimestamp") {
		t.Errorf("after every refusal: %d %s", r.status, r.body)
	}
}
