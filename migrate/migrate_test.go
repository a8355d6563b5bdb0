package migrate

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/idempotency"
	"github.com/keygate/keygate/internal/notify"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
)

// data is what fill made: the keys' tokens, and what clients hold of the
// contracts and shares.
type data struct {
	tokens    map[string]string // key name → token
	contracts map[string]string // contract label → id
	links     []string          // every signing-link token
	// otpSigner is the token of a signer who was sent a one-time
	// password and has not used it.
	otpSigner string
	// lastSigner is the token of the one signer of contract "ongoing"
	// who has not decided.
	lastSigner string
	shares     map[string]string // share label → uuid
	passwords  map[string]string // share label → password
	unlockedBy *http.Cookie      // the unlock cookie of share "issue"
	// keyed are the creates sent with an Idempotency-Key (contract
	// "sent", share "jql"), with their first replies.
	keyed []keyedCreate
}

// keyedCreate is a create sent with an Idempotency-Key and its reply.
type keyedCreate struct {
	token, target, body, key string
	first                    reply
}

// mustKeyed sends a create with an Idempotency-Key, records it in d and
// decodes its 201 reply into out.
func (d *data) mustKeyed(w *world, token, target string, body, out any) {
	w.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		w.t.Fatal(err)
	}
	k := keyedCreate{token: token, target: target, body: string(raw), key: "fill-" + string(rune('a'+len(d.keyed)))}
	k.first = w.postKey(token, target, k.body, k.key)
	if k.first.Status != http.StatusCreated || k.first.Headers[idempotency.ReplayedHeader] != "" {
		w.t.Fatalf("keyed create: %d %s", k.first.Status, k.first.Body)
	}
	if err := json.Unmarshal([]byte(k.first.Body), out); err != nil {
		w.t.Fatal(err)
	}
	d.keyed = append(d.keyed, k)
}

// fill stores, through the APIs and pages, keys that are used (and one
// that is not), templates, contracts in every status (sent, ongoing with
// a stored signature, signed with its PDFs, rejected, expired as swept and
// as not yet swept, archived; one deleted), a pending one-time password,
// mail waiting in the outbox (invitations, e-mails and texts, completed
// contracts with PDF attachments) and shares with passwords, activity and
// openings (one deleted).
func fill(w *world) *data {
	t := w.t
	d := &data{tokens: map[string]string{}, contracts: map[string]string{}, shares: map[string]string{}, passwords: map[string]string{}}
	for _, k := range []string{
		`{"service": "contracts", "name": "alice contracts", "owner": "alice", "privileges": ["get", "search", "create", "archive", "delete"]}`,
		`{"service": "contracts", "name": "carl contracts", "owner": "carl", "privileges": ["get", "search", "create"], "allowedIps": ["198.51.100.0/24"]}`,
		`{"service": "contracts", "name": "idle", "owner": "ivy", "privileges": ["get"], "notValidAfter": "2030-01-01T00:00:00Z"}`,
		`{"service": "share", "name": "alice shares", "owner": "alice", "privileges": ["get", "list", "create", "delete"], "adminProjects": ["*"]}`,
		`{"service": "share", "name": "carol shares", "owner": "carol", "privileges": ["get", "list", "create"], "adminProjects": ["P2"]}`,
	} {
		var in keystore.KeyInput
		if err := json.Unmarshal([]byte(k), &in); err != nil {
			t.Fatal(err)
		}
		key, err := w.keys.Create(&in)
		if err != nil {
			t.Fatal(err)
		}
		d.tokens[key.Name] = key.Token
	}
	for _, tp := range []contracts.Template{
		{ID: "PAGE-1", CollectionID: "LEGAL", Title: "Mutual NDA", Body: "The parties keep each other's secrets."},
		{ID: "PAGE-2", CollectionID: "HR", Title: "Lease", Body: "The tenant pays on the first day of each month."},
	} {
		if _, err := w.tpl.Put(tp); err != nil {
			t.Fatal(err)
		}
	}

	alice, carl := d.tokens["alice contracts"], d.tokens["carl contracts"]
	type signerOut struct {
		AccessURL string `json:"accessUrl"`
	}
	create := func(label, token, template, name string, signers []map[string]any, extra map[string]any) []string {
		body := map[string]any{"templateId": template, "name": name, "signers": signers,
			"watchers": []map[string]any{{"name": "Legal", "email": "legal@example.com", "notificationKinds": "created|opened|signed|rejected|completed|completed-contract"}}}
		for k, v := range extra {
			body[k] = v
		}
		var out struct {
			ID      string      `json:"id"`
			Signers []signerOut `json:"signers"`
		}
		if label == "sent" {
			d.mustKeyed(w, token, contracts.Prefix, body, &out)
		} else {
			w.must(http.StatusCreated, token, http.MethodPost, contracts.Prefix, body, &out)
		}
		d.contracts[label] = out.ID
		var links []string
		for _, s := range out.Signers {
			links = append(links, s.AccessURL[strings.LastIndexByte(s.AccessURL, '/')+1:])
		}
		d.links = append(d.links, links...)
		return links
	}
	none := func(name, email string) map[string]any {
		return map[string]any{"fullName": name, "accessKind": "email", "email": email, "otpMethod": "none"}
	}
	decide := func(link string, body map[string]any) {
		w.must(http.StatusOK, "", http.MethodPost, "/sign/"+link+"/decision", body, nil)
	}
	render := func(name string) map[string]any {
		return map[string]any{"decision": "signed", "method": "render", "signature": name}
	}

	// Expired, as the sweep wrote it down, and as nobody has yet.
	soon := func(d time.Duration) map[string]any {
		return map[string]any{"expirationTimestamp": w.clock.Now().Add(d).Format(time.RFC3339)}
	}
	create("expired-swept", carl, "PAGE-2", "Lapsed lease", []map[string]any{none("Eve Early", "eve@example.com")}, soon(time.Hour))
	w.clock.Advance(2 * time.Hour)
	if n, err := w.svc.Contracts().SweepExpired(context.Background(), 0); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	create("expired-unswept", alice, "PAGE-1", "Forgotten NDA", []map[string]any{none("Una Late", "una@example.com")}, soon(30*time.Minute))
	w.clock.Advance(time.Hour)

	create("sent", alice, "PAGE-1", "NDA with Zoë Ångström", []map[string]any{
		{"fullName": "Zoë Ångström", "accessKind": "email", "email": "zoe@example.com", "otpMethod": "email"},
		{"fullName": "Bob Brook", "accessKind": "url", "otpMethod": "none"},
		{"fullName": "Sam Text", "accessKind": "email", "email": "sam@example.com", "phone": "+14155552671", "otpMethod": "sms"}}, nil)
	ongoing := create("ongoing", carl, "PAGE-2", "STRASSE lease", []map[string]any{
		none("Olga Ost", "olga@example.com"), none("Paul Post", "paul@example.com")}, nil)
	decide(ongoing[0], render("Olga Ost"))
	d.lastSigner = ongoing[1]
	signed := create("signed", alice, "PAGE-1", "Signed deal", []map[string]any{
		none("Ada Able", "ada@example.com"), none("Ben Best", "ben@example.com")}, map[string]any{"sequentialSigning": true})
	decide(signed[0], render("Ada Able"))
	decide(signed[1], render("Ben Best"))
	w.svc.WaitSealing() // its documents, sealed in the background
	rejected := create("rejected", carl, "PAGE-1", "Rejected offer", []map[string]any{none("Rita Red", "rita@example.com")}, nil)
	decide(rejected[0], map[string]any{"decision": "rejected", "reason": "The terms are unclear."})
	create("archived", alice, "PAGE-2", "Archived lease", []map[string]any{none("Arno Arch", "arno@example.com")}, nil)
	w.must(http.StatusNoContent, alice, http.MethodPatch, contracts.Prefix+"/"+d.contracts["archived"], nil, nil)
	create("deleted", alice, "PAGE-1", "Deleted draft", []map[string]any{none("Del Gone", "del@example.com")}, nil)
	w.must(http.StatusNoContent, alice, http.MethodDelete, contracts.Prefix+"/"+d.contracts["deleted"], nil, nil)
	delete(d.contracts, "deleted")
	d.links = d.links[:len(d.links)-1]

	// A one-time password sent and not used yet, by e-mail and by text.
	sent := d.links[2:5]
	w.must(http.StatusAccepted, "", http.MethodPost, "/sign/"+sent[0]+"/otp", nil, nil)
	w.must(http.StatusAccepted, "", http.MethodPost, "/sign/"+sent[2]+"/otp", nil, nil)
	d.otpSigner = sent[0]

	// Every signing page opened once: the first opening is written (and
	// tells the watchers), later ones are not.
	for _, link := range d.links {
		w.get("", "/sign/"+link)
	}

	// Shares.
	sa, sc := d.tokens["alice shares"], d.tokens["carol shares"]
	var sh struct {
		UUID string `json:"uuid"`
	}
	for _, s := range []struct {
		label, token, password string
		body                   map[string]any
	}{
		{"issue", sa, "s3cret Ünïcode", map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "P1",
			"expirationExpression": map[string]any{"days": 30}, "customFields": []map[string]any{{"id": "summary"}}}},
		{"board", sa, "", map[string]any{"type": "BOARD", "projectId": "P2", "board": map[string]any{"id": "7"}}},
		{"jql", sc, "jql-pass", map[string]any{"type": "JQL", "projectId": "P1", "jql": "project = P1",
			"selectedUsersConfig": map[string]any{"allowed": true, "list": []map[string]any{{"email": "guest@example.com"}}}}},
		{"carol issue", sc, "", map[string]any{"type": "ISSUE", "issueId": "10002"}},
		{"gone", sa, "", map[string]any{"type": "ISSUE", "issueId": "10003", "projectId": "P3"}},
	} {
		if s.password != "" {
			s.body["password"] = s.password
			d.passwords[s.label] = s.password
		}
		if s.label == "jql" {
			d.mustKeyed(w, s.token, "/webapi/share", s.body, &sh)
		} else {
			w.must(http.StatusCreated, s.token, http.MethodPost, "/webapi/share", s.body, &sh)
		}
		d.shares[s.label] = sh.UUID
		w.clock.Advance(time.Minute)
	}
	w.must(http.StatusOK, sa, http.MethodPut, "/webapi/share/"+d.shares["board"],
		map[string]any{"type": "BOARD", "projectId": "P2", "board": map[string]any{"id": "8"}}, nil)
	w.must(http.StatusNoContent, sa, http.MethodDelete, "/webapi/share/"+d.shares["gone"], nil, nil)
	delete(d.shares, "gone")

	// Openings and unlocks, written by the flush.
	for range 3 {
		w.get("", "/s/"+d.shares["board"])
	}
	if r, _ := w.do("", http.MethodPost, "/s/"+d.shares["issue"]+"/unlock", "application/json", `{"password":"wrong"}`); r.Status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d %s", r.Status, r.Body)
	}
	r, rec := w.do("", http.MethodPost, "/s/"+d.shares["issue"]+"/unlock", "application/json", `{"password":"s3cret Ünïcode"}`)
	if r.Status != http.StatusNoContent || len(rec.Result().Cookies()) != 1 {
		t.Fatalf("unlock: %d %s", r.Status, r.Body)
	}
	d.unlockedBy = rec.Result().Cookies()[0]
	if r := w.get("", "/s/"+d.shares["issue"], d.unlockedBy); r.Status != http.StatusOK {
		t.Fatalf("unlocked page: %d %s", r.Status, r.Body)
	}
	if err := w.shares.Flush(); err != nil {
		t.Fatal(err)
	}
	return d
}

// contractSearches are searches whose answers must not change.
var contractSearches = []string{
	"order=creation-date-asc&page-size=100",
	"order=creation-date-desc&page=2&page-size=3",
	"statuses=expired&order=name-asc",
	"statuses=sent|ongoing&order=creation-date-desc",
	"statuses=signed|rejected&placement=stacked&order=creator-id-asc",
	"placement=archived&order=name-desc",
	"template-id=PAGE-2&creator-id=carl&order=creation-date-asc",
	"substring=" + url.QueryEscape("zoë") + "&order=name-asc",
	"substring=strasse&order=name-asc",
	"substring=" + url.QueryEscape("@example.com") + "&order=creator-id-desc",
}

// shareLists are share lists whose answers must not change.
var shareLists = []string{
	"",
	"sort=created_at&sortOrder=desc",
	"sort=updated_at&limit=2&offset=1",
	"sort=opened_count&sortOrder=desc",
	"sort=uuid",
	"projectId=P1",
	"projectId=P1&userId=carol",
	"userId=alice&sort=type",
	"issueId=10001",
	"issueId=10002&sort=expiration",
}

// snapshot is every answer a client can get of the data, by request.
func snapshot(w *world, d *data) map[string]reply {
	out := map[string]reply{}
	get := func(token, target string, cookies ...*http.Cookie) {
		key := target
		if token != "" {
			key = keyName(d, token) + " " + target
		}
		out[key] = w.get(token, target, cookies...)
	}
	alice, carl := d.tokens["alice contracts"], d.tokens["carl contracts"]
	for label, id := range d.contracts {
		for _, tok := range []string{alice, carl} {
			get(tok, contracts.Prefix+"/"+id)
		}
		if label == "signed" {
			var c struct {
				FinalizedPDF   struct{ URL string } `json:"finalizedPdf"`
				CertificatePDF struct{ URL string } `json:"certificatePdf"`
			}
			w.must(http.StatusOK, alice, http.MethodGet, contracts.Prefix+"/"+id, nil, &c)
			for _, u := range []string{c.FinalizedPDF.URL, c.CertificatePDF.URL} {
				if u == "" {
					w.t.Fatalf("signed contract lists no PDF: %+v", c)
				}
				get(alice, strings.TrimPrefix(u, baseURL))
			}
		}
	}
	for _, q := range contractSearches {
		get(alice, contracts.Prefix+"?"+q)
	}
	for _, link := range d.links {
		get("", "/sign/"+link)
	}
	sa, sc := d.tokens["alice shares"], d.tokens["carol shares"]
	for _, id := range d.shares {
		for _, tok := range []string{sa, sc} {
			get(tok, "/webapi/share/"+id)
			get(tok, "/webapi/share/"+id+"/activity")
		}
	}
	for _, q := range shareLists {
		for _, tok := range []string{sa, sc} {
			get(tok, "/webapi/share?"+q)
		}
	}
	return out
}

// pages are the answers of the public share pages. They count openings,
// so they are compared apart: before the API's answers on bbolt (which
// then count them), after them on PostgreSQL.
func pages(w *world, d *data) map[string]reply {
	out := map[string]reply{}
	for _, target := range []string{"/s/" + d.shares["issue"], "/s/" + d.shares["jql"], "/s/" + d.shares["carol issue"]} {
		out[target] = w.get("", target, d.unlockedBy)
	}
	if err := w.shares.Flush(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

func keyName(d *data, token string) string {
	for name, t := range d.tokens {
		if t == token {
			return name
		}
	}
	return "?"
}

// keysView is every key as administrators list it, and its token as
// revealed.
func keysView(t *testing.T, w *world) ([]keystore.Key, map[string]string) {
	t.Helper()
	list := w.keys.List("")
	tokens := map[string]string{}
	for _, k := range list {
		tok, err := w.keys.Reveal(k.ID)
		if err != nil {
			t.Fatalf("reveal %s: %v", k.Name, err)
		}
		tokens[k.Name] = tok
	}
	return list, tokens
}

// TestCopyToPostgres fills a bbolt database through the real stores and
// handlers, copies it, and checks through the PostgreSQL backends that
// every key authorizes with its token and reveals it with the same usage,
// every contract, search, signing link, attachment, share, list and
// activity answers byte for byte what it answered on bbolt, a password
// sent before the copy signs after it, every waiting message is delivered
// the same, the share password and unlock cookie still work, and new ids
// continue after the copied ones. The bbolt file is not changed, and a
// second copy into the schema is refused without changing it.
func TestCopyToPostgres(t *testing.T) {
	dir := t.TempDir()
	boltPath := filepath.Join(dir, "webapi.db")
	masterKey := make([]byte, 32)
	rand.Read(masterKey)
	clock := testclock.New(t0)

	src := openBolt(t, boltPath)
	w1 := openWorld(t, src, masterKey, clock)
	d := fill(w1)
	pagesBefore := pages(w1, d)
	before := snapshot(w1, d)

	// While the gateway holds the file, the copy is refused.
	_, cfg := openSchema(t)
	_, err := BoltToPostgres(context.Background(), Config{BoltPath: boltPath, MasterKey: masterKey, Postgres: cfg, LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, boltdb.ErrLocked) || !strings.Contains(err.Error(), "stop it first") {
		t.Fatalf("copy of a held file: %v", err)
	}

	w1.stop()
	keysBefore, tokensBefore := keysView(t, w1)
	for name, tok := range d.tokens {
		if tokensBefore[name] != tok {
			t.Fatalf("key %s reveals %q on bbolt, was created with %q", name, tokensBefore[name], tok)
		}
	}
	usageFrom, usageTo := t0.Add(-48*time.Hour), t0.Add(48*time.Hour)
	usageBefore := map[string]string{}
	for _, k := range keysBefore {
		sb, err := w1.keys.UsageOver(k.ID, usageFrom, usageTo, false)
		if err != nil {
			t.Fatal(err)
		}
		usageBefore[k.ID] = mustJSON(t, sb)
	}
	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	fileBefore := fileBytes(t, boltPath)

	dst, cfg := openSchema(t)
	rep, err := BoltToPostgres(context.Background(), Config{BoltPath: boltPath, MasterKey: masterKey, Postgres: cfg, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fileBefore, fileBytes(t, boltPath)) {
		t.Fatal("the copy changed the bbolt file")
	}
	counts := map[string]int64{}
	for _, c := range rep.Copied {
		counts[c.Kind] = c.N
	}
	want := map[string]int64{
		"keys": 5, "templates": 2, "contract documents": 2, "contracts": 7, "signing links": 11, "attachments": 2,
		"one-time passwords": 2, "signatures": 1, "shares": 4, "share activity": 12, "idempotent replies": 2,
	}
	for kind, n := range want {
		if counts[kind] != n {
			t.Errorf("copied %d %s, want %d (report %+v)", counts[kind], kind, n, rep.Copied)
		}
	}
	if counts["trail events"] < 20 {
		t.Errorf("copied %d trail events, want every contract's steps (report %+v)", counts["trail events"], rep.Copied)
	}
	if counts["pending messages"] < 20 {
		t.Errorf("copied %d pending messages, want the invitations, passwords and notifications (report %+v)", counts["pending messages"], rep.Copied)
	}
	if rep.Schema != cfg.Schema {
		t.Errorf("report names schema %s, want %s", rep.Schema, cfg.Schema)
	}

	// The gateway on PostgreSQL, at the same time.
	w2 := openWorld(t, dst, masterKey, clock)
	keysAfter, tokensAfter := keysView(t, w2)
	if kb, ka := mustJSON(t, keysBefore), mustJSON(t, keysAfter); kb != ka {
		t.Fatalf("keys differ:\nbbolt    %s\npostgres %s", kb, ka)
	}
	if !reflect.DeepEqual(tokensBefore, tokensAfter) {
		t.Fatalf("revealed tokens differ:\nbbolt    %v\npostgres %v", tokensBefore, tokensAfter)
	}
	// Usage over time came along, hour by hour.
	hours := 0
	for _, k := range keysBefore {
		sa, err := w2.keys.UsageOver(k.ID, usageFrom, usageTo, false)
		if err != nil {
			t.Fatal(err)
		}
		if b, a := usageBefore[k.ID], mustJSON(t, sa); b != a {
			t.Errorf("usage over time of %s differs:\nbbolt    %s\npostgres %s", k.Name, b, a)
		}
		for _, b := range sa.Buckets {
			hours += int(b.OK)
		}
	}
	if hours == 0 {
		t.Error("no usage over time to copy: the fill used no key")
	}
	used := 0
	for _, k := range keysAfter {
		if k.UsageCount > 0 {
			used++
		}
	}
	if used != 4 {
		t.Errorf("%d keys used, want 4 (all but idle)", used)
	}
	compareReplies(t, before, snapshot(w2, d))
	compareReplies(t, pagesBefore, pages(w2, d))
	// A create retried after the move gets its first reply, not a second
	// contract or share.
	for _, k := range d.keyed {
		want := k.first
		want.Headers[idempotency.ReplayedHeader] = "true"
		if got := w2.postKey(k.token, k.target, k.body, k.key); !reflect.DeepEqual(got, want) {
			t.Errorf("retry of %s after the copy:\n got %+v\nwant %+v", k.target, got, want)
		}
	}

	// Every waiting message is delivered, sealed parts opened, as the
	// bbolt outbox delivers it.
	n := int(counts["pending messages"])
	delivered := w2.deliver(n)
	if len(delivered) != n {
		t.Fatalf("delivered %d messages, want %d", len(delivered), n)
	}
	var code string
	for _, m := range delivered {
		if m.To == "zoe@example.com" && strings.HasPrefix(m.Subject, "Your one-time password") {
			code = regexp.MustCompile(`\b\d{6}\b`).FindString(m.Text)
		}
	}
	if code == "" {
		t.Fatal("no one-time password e-mail to zoe@example.com delivered")
	}
	// The password sent through bbolt signs through PostgreSQL.
	w2.must(http.StatusOK, "", http.MethodPost, "/sign/"+d.otpSigner+"/decision",
		map[string]any{"decision": "signed", "method": "render", "signature": "Zoë Ångström", "otp": code}, nil)
	// A contract begun on bbolt and completed on PostgreSQL: its
	// certificate lists the steps taken on each.
	w2.must(http.StatusOK, "", http.MethodPost, "/sign/"+d.lastSigner+"/decision",
		map[string]any{"decision": "signed", "method": "render", "signature": "Paul Post"}, nil)
	w2.svc.WaitSealing()
	var done struct {
		CertificatePDF struct{ URL string } `json:"certificatePdf"`
	}
	w2.must(http.StatusOK, d.tokens["carl contracts"], http.MethodGet, contracts.Prefix+"/"+d.contracts["ongoing"], nil, &done)
	cert := w2.get(d.tokens["carl contracts"], strings.TrimPrefix(done.CertificatePDF.URL, baseURL))
	text := strings.Join(strings.Fields(pdftest.Text(t, []byte(cert.Body))), " ")
	for _, want := range []string{"Contract created through the API by carl", "Invitation queued for delivery by e-mail to o•••@example.com",
		"Invitation queued for delivery by e-mail to p•••@example.com", "Signed: typed name", "Contract completed"} {
		if !strings.Contains(text, want) {
			t.Errorf("certificate of a contract completed after the copy lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "Signed: typed name"); n != 2 || strings.Contains(text, "recorded before the event trail") {
		t.Errorf("certificate of a contract completed after the copy lists %d signatures, want both from the trail:\n%s", n, text)
	}
	// The share password unlocks, a wrong one does not.
	if r, _ := w2.do("", http.MethodPost, "/s/"+d.shares["issue"]+"/unlock", "application/json", `{"password":"nope"}`); r.Status != http.StatusUnauthorized {
		t.Fatalf("wrong password on postgres: %d %s", r.Status, r.Body)
	}
	if r, _ := w2.do("", http.MethodPost, "/s/"+d.shares["issue"]+"/unlock", "application/json", `{"password":"s3cret Ünïcode"}`); r.Status != http.StatusNoContent {
		t.Fatalf("password on postgres: %d %s", r.Status, r.Body)
	}
	if r, _ := w2.do("", http.MethodPost, "/s/"+d.shares["jql"]+"/unlock", "application/json", `{"password":"jql-pass","email":"guest@example.com"}`); r.Status != http.StatusNoContent {
		t.Fatalf("password and e-mail on postgres: %d %s", r.Status, r.Body)
	}

	// New records take ids after the copied ones, deleted ones included.
	var sh struct {
		ID uint64 `json:"id"`
	}
	w2.must(http.StatusCreated, d.tokens["alice shares"], http.MethodPost, "/webapi/share", map[string]any{"type": "ISSUE", "issueId": "10009"}, &sh)
	if sh.ID != 6 {
		t.Errorf("new share id %d, want 6 (five given on bbolt, the last one deleted)", sh.ID)
	}
	var maxID uint64
	for id := range delivered {
		maxID = max(maxID, id)
	}
	w2.must(http.StatusCreated, d.tokens["carl contracts"], http.MethodPost, contracts.Prefix, map[string]any{"templateId": "PAGE-1", "name": "After the move",
		"signers": []map[string]any{{"fullName": "Nia New", "accessKind": "email", "email": "nia@example.com", "otpMethod": "none"}}}, nil)
	later := w2.deliverUntil(func(ms map[uint64]notify.Message) bool {
		for _, m := range ms {
			if m.To == "nia@example.com" {
				return true
			}
		}
		return false
	})
	for id, m := range later {
		if id <= maxID {
			t.Errorf("new message %d to %s: ids up to %d were given on bbolt", id, m.To, maxID)
		}
	}

	// The same messages, delivered from the bbolt file.
	src = openBolt(t, boltPath)
	w3 := openWorld(t, src, masterKey, clock)
	fromBolt := w3.deliver(n)
	src.Close()
	if !reflect.DeepEqual(fromBolt, delivered) {
		for id, m := range fromBolt {
			if !reflect.DeepEqual(m, delivered[id]) {
				t.Errorf("message %d:\nbbolt    %+v\npostgres %+v", id, m, delivered[id])
			}
		}
		t.Fatal("messages delivered from postgres differ from those of bbolt")
	}

	// A second copy into the schema is refused, and changes nothing.
	digest := storetest.Digest(t, dst)
	_, err = BoltToPostgres(context.Background(), Config{BoltPath: boltPath, MasterKey: masterKey, Postgres: cfg})
	if !errors.Is(err, pgdb.ErrNotEmpty) || !strings.Contains(err.Error(), "keys (5 rows)") || !strings.Contains(err.Error(), "contracts (8 rows)") {
		t.Fatalf("copy into a schema with data: %v", err)
	}
	if storetest.Digest(t, dst) != digest {
		t.Fatal("a refused copy changed the schema")
	}
}

// compareReplies fails for every request whose reply differs.
func compareReplies(t *testing.T, before, after map[string]reply) {
	t.Helper()
	var names []string
	for k := range before {
		names = append(names, k)
	}
	sort.Strings(names)
	bad := 0
	for _, k := range names {
		b, a := before[k], after[k]
		// Every signing link works; the API may refuse a key what it may
		// not see, alike on both.
		if b.Status >= 500 || (strings.HasPrefix(k, "/sign/") && b.Status != http.StatusOK) {
			t.Errorf("%s answered %d on bbolt: %s", k, b.Status, b.Body)
		}
		if !reflect.DeepEqual(b, a) {
			bad++
			t.Errorf("%s:\nbbolt    %d %v %.2000s\npostgres %d %v %.2000s", k, b.Status, b.Headers, b.Body, a.Status, a.Headers, a.Body)
		}
	}
	if bad == 0 && len(names) < 3 {
		t.Fatalf("only %d requests compared", len(names))
	}
}

// TestFailedCopyLeavesTargetEmpty: a record that cannot be copied, found
// after most of the data went in, rolls everything back.
func TestFailedCopyLeavesTargetEmpty(t *testing.T) {
	dir := t.TempDir()
	boltPath := filepath.Join(dir, "webapi.db")
	masterKey := make([]byte, 32)
	rand.Read(masterKey)
	src := openBolt(t, boltPath)
	w := openWorld(t, src, masterKey, testclock.New(t0))
	d := fill(w)
	w.stop()
	// Damage the last store's data: a share record that does not decode.
	err := src.Update(context.Background(), func(tx storage.Tx) error {
		return boltdb.Of(tx).Bucket([]byte("share")).Put([]byte{0, 0, 0, 0, 0, 0, 0, 2}, []byte("{not json"))
	})
	if err != nil {
		t.Fatal(err)
	}
	src.Close()
	_ = d

	dst, cfg := openSchema(t)
	empty := storetest.Digest(t, dst)
	_, err = BoltToPostgres(context.Background(), Config{BoltPath: boltPath, MasterKey: masterKey, Postgres: cfg})
	if err == nil || !strings.Contains(err.Error(), "share 0000000000000002: the stored record does not decode") {
		t.Fatalf("copy of a damaged share: %v", err)
	}
	if storetest.Digest(t, dst) != empty {
		t.Fatal("a failed copy left data in the schema")
	}
}

// TestRefusals: every input the copy cannot work with is refused with an
// error that says what is wrong, before anything is written.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	masterKey := make([]byte, 32)
	rand.Read(masterKey)
	good := filepath.Join(dir, "webapi.db")
	src := openBolt(t, good)
	w := openWorld(t, src, masterKey, testclock.New(t0))
	var in keystore.KeyInput
	if err := json.Unmarshal([]byte(`{"service": "contracts", "name": "k", "owner": "o", "privileges": ["get"]}`), &in); err != nil {
		t.Fatal(err)
	}
	if _, err := w.keys.Create(&in); err != nil {
		t.Fatal(err)
	}
	src.Close()

	other := filepath.Join(dir, "other.db")
	odb := openBolt(t, other)
	if err := odb.CreateBuckets([]byte("settings")); err != nil {
		t.Fatal(err)
	}
	odb.Close()
	notBolt := filepath.Join(dir, "notes.txt")
	writeFile(t, notBolt, bytes.Repeat([]byte("not a database\n"), 5000))
	short := filepath.Join(dir, "short.txt")
	writeFile(t, short, []byte("not a database\n"))
	cut := filepath.Join(t.TempDir(), "webapi.db")
	writeFile(t, cut, fileBytes(t, good)[:8192])

	wrongKey := bytes.Repeat([]byte{9}, 32)
	tests := []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"no file", func(c *Config) { c.BoltPath = filepath.Join(dir, "missing", "webapi.db") }, "no such file"},
		{"a directory", func(c *Config) { c.BoltPath = dir }, "is not a regular file"},
		{"not bbolt", func(c *Config) { c.BoltPath = notBolt }, "is not a bbolt file or its header is damaged"},
		{"too short for bbolt", func(c *Config) { c.BoltPath = short }, "is not a bbolt file or is cut short: 15 bytes"},
		{"another program's", func(c *Config) { c.BoltPath = other }, `not a keygate database: it holds buckets of another program ("settings")`},
		{"cut short", func(c *Config) { c.BoltPath = cut }, "is truncated"},
		{"wrong master key", func(c *Config) { c.MasterKey = wrongKey }, "its sealed token does not open with this master key"},
		{"short master key", func(c *Config) { c.MasterKey = masterKey[:16] }, "32 bytes"},
		{"bad schema name", func(c *Config) { c.Postgres.Schema = "Key-Gate" }, "must be a lower-case identifier"},
		{"bad dsn", func(c *Config) { c.Postgres.DSN = "postgres://u:pw@[::1" }, "does not parse"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dst, pc := openSchema(t)
			empty := storetest.Digest(t, dst)
			cfg := Config{BoltPath: good, MasterKey: masterKey, Postgres: pc}
			tc.cfg(&cfg)
			_, err := BoltToPostgres(context.Background(), cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if storetest.Digest(t, dst) != empty {
				t.Fatal("a refused copy wrote to the schema")
			}
		})
	}
}

// TestMasterKeyOfAnotherDeployment: a schema whose master key check was
// recorded with another key (a gateway started on it once) is refused;
// one recorded with the same key is no data and is copied into.
func TestMasterKeyOfAnotherDeployment(t *testing.T) {
	dir := t.TempDir()
	masterKey := make([]byte, 32)
	rand.Read(masterKey)
	path := filepath.Join(dir, "webapi.db")
	src := openBolt(t, path)
	openWorld(t, src, masterKey, testclock.New(t0))
	src.Close()

	for _, tc := range []struct {
		name    string
		started []byte
		want    string // "" for a copy that succeeds
	}{
		{"other key", bytes.Repeat([]byte{1}, 32), "master key does not match"},
		{"same key", masterKey, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dst, cfg := openSchema(t)
			if err := dst.CheckMasterKey(context.Background(), tc.started); err != nil {
				t.Fatal(err)
			}
			_, err := BoltToPostgres(context.Background(), Config{BoltPath: path, MasterKey: masterKey, Postgres: cfg})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("copy into a schema started with the same key: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
