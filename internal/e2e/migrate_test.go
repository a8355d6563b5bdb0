package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// migrateReply is what a client sees of one answer.
type migrateReply struct {
	Status  int
	Headers map[string]string
	Body    string
}

// migrateGet sends a GET with an optional bearer token and cookie.
func migrateGet(t *testing.T, target, token string, cookie *http.Cookie) migrateReply {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if cookie != nil {
		req.AddCookie(cookie)
	}
	resp, err := crashClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := migrateReply{Status: resp.StatusCode, Headers: map[string]string{}, Body: string(b)}
	for _, h := range []string{"Content-Type", "X-Total-Count", "Etag", "Content-Disposition"} {
		if v := resp.Header.Get(h); v != "" {
			r.Headers[h] = v
		}
	}
	return r
}

// TestMigrateBoltToPostgres runs a gateway on bbolt, gives it data through
// its APIs and pages (keys used and idle, contracts in every status with
// the PDFs of a signed one, a one-time password not used yet, mail that
// the SMTP server refused and that waits in the outbox, shares with
// passwords, activity and openings), stops it, runs `caddy webapi migrate`
// and restarts it on PostgreSQL at the same addresses. Every key then
// lists, reveals and authorizes as before; every contract, attachment,
// search, signing link, share, list, activity and page answers byte for
// byte what it answered; the mail that waited is delivered once; the
// password sent before the move signs; and share passwords unlock.
func TestMigrateBoltToPostgres(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.Schema(t) // dropped after the gateway has stopped
	ms := mailtest.Start(t)
	ms.FailNext(1 << 30)
	smtp := fmt.Sprintf("smtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}", ms.Addr)
	dir := t.TempDir()
	g := start(t, gatewayproc.Options{Dir: dir, WebAPI: smtp})

	// Keys and templates.
	tokens := map[string]string{}
	for _, k := range []struct {
		service, name, owner string
		privileges           []string
		extra                map[string]any
	}{
		{"contracts", "alice contracts", "alice", []string{"get", "search", "create", "archive"}, nil},
		{"contracts", "carl contracts", "carl", []string{"get", "search", "create"}, map[string]any{"allowedIps": []string{"127.0.0.1"}}},
		{"contracts", "idle", "ivy", []string{"get"}, nil},
		{"share", "alice shares", "alice", []string{"get", "list", "create", "delete"}, map[string]any{"adminProjects": []string{"*"}}},
		{"share", "carol shares", "carol", []string{"get", "list", "create"}, map[string]any{"adminProjects": []string{"P2"}}},
	} {
		key, err := g.CreateKey(k.service, k.name, k.owner, k.privileges, k.extra)
		if err != nil {
			t.Fatal(err)
		}
		tokens[k.name] = key.Token
	}
	for _, tp := range [][4]string{{"PAGE-1", "LEGAL", "Mutual NDA", "Keep each other's secrets."}, {"PAGE-2", "HR", "Lease", "Pay on the first."}} {
		if err := g.AddTemplate(tp[0], tp[1], tp[2], tp[3]); err != nil {
			t.Fatal(err)
		}
	}

	// Contracts in every status.
	alice, carl := tokens["alice contracts"], tokens["carl contracts"]
	ids := map[string]string{}
	var links []string
	create := func(label, token, template, name string, signers []map[string]any, extra map[string]any) []string {
		body := map[string]any{"templateId": template, "name": name, "signers": signers,
			"watchers": []map[string]any{{"name": "Legal", "email": "legal@example.com", "notificationKinds": "created|signed|rejected|completed|completed-contract"}}}
		for k, v := range extra {
			body[k] = v
		}
		var out struct {
			ID      string `json:"id"`
			Signers []struct {
				AccessURL string `json:"accessUrl"`
			} `json:"signers"`
		}
		crashMust(t, "POST", g.Site+"/webapi/contracts", token, body, http.StatusCreated, &out)
		ids[label] = out.ID
		var ls []string
		for _, s := range out.Signers {
			ls = append(ls, s.AccessURL[strings.LastIndexByte(s.AccessURL, '/')+1:])
		}
		links = append(links, ls...)
		return ls
	}
	none := func(name, email string) map[string]any {
		return map[string]any{"fullName": name, "accessKind": "email", "email": email, "otpMethod": "none"}
	}
	sign := func(link, name string) {
		crashMust(t, "POST", g.Site+"/sign/"+link+"/decision", "", map[string]any{"decision": "signed", "method": "render", "signature": name}, http.StatusOK, nil)
	}
	// The server refuses an expiry that is not in the future when the
	// create reaches it: 5 s leaves room for a slow create, and the
	// wait for the expiry below runs while the rest is set up.
	expires := time.Now().Add(5 * time.Second)
	create("expired", carl, "PAGE-2", "Lapsing lease", []map[string]any{none("Eve Early", "eve@example.com")},
		map[string]any{"expirationTimestamp": expires.UTC().Format(time.RFC3339Nano)})
	sent := create("sent", alice, "PAGE-1", "NDA with Zoë Ångström", []map[string]any{
		{"fullName": "Zoë Ångström", "accessKind": "email", "email": "zoe@example.com", "otpMethod": "email"},
		{"fullName": "Bob Brook", "accessKind": "url", "otpMethod": "none"}}, nil)
	ongoing := create("ongoing", carl, "PAGE-2", "STRASSE lease", []map[string]any{none("Olga Ost", "olga@example.com"), none("Paul Post", "paul@example.com")}, nil)
	sign(ongoing[0], "Olga Ost")
	signed := create("signed", alice, "PAGE-1", "Signed deal", []map[string]any{none("Ada Able", "ada@example.com"), none("Ben Best", "ben@example.com")}, nil)
	sign(signed[0], "Ada Able")
	sign(signed[1], "Ben Best")
	testwait.For(t, testwait.Generous, "the signed deal's documents to be sealed", func() bool {
		return strings.Contains(migrateGet(t, g.Site+"/webapi/contracts/"+ids["signed"], alice, nil).Body, `"documentStatus":"sealed"`)
	})
	rejected := create("rejected", carl, "PAGE-1", "Rejected offer", []map[string]any{none("Rita Red", "rita@example.com")}, nil)
	crashMust(t, "POST", g.Site+"/sign/"+rejected[0]+"/decision", "", map[string]any{"decision": "rejected", "reason": "Unclear."}, http.StatusOK, nil)
	create("archived", alice, "PAGE-2", "Archived lease", []map[string]any{none("Arno Arch", "arno@example.com")}, nil)
	crashMust(t, "PATCH", g.Site+"/webapi/contracts/"+ids["archived"], alice, nil, http.StatusNoContent, nil)
	crashMust(t, "POST", g.Site+"/sign/"+sent[0]+"/otp", "", nil, http.StatusAccepted, nil)
	for _, link := range links {
		crashMust(t, "GET", g.Site+"/sign/"+link, "", nil, http.StatusOK, nil) // the first opening is written
	}

	// Shares, with openings and unlocks.
	sa, sc := tokens["alice shares"], tokens["carol shares"]
	shares := map[string]string{}
	for _, s := range []struct {
		label, token string
		body         map[string]any
	}{
		{"issue", sa, map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "P1", "password": "s3cret Ünïcode", "expirationExpression": map[string]any{"days": 30}}},
		{"board", sa, map[string]any{"type": "BOARD", "projectId": "P2", "board": map[string]any{"id": "7"}}},
		{"jql", sc, map[string]any{"type": "JQL", "projectId": "P2", "jql": "project = P2", "password": "jql-pass",
			"selectedUsersConfig": map[string]any{"allowed": true, "list": []map[string]any{{"email": "guest@example.com"}}}}},
		{"carol issue", sc, map[string]any{"type": "ISSUE", "issueId": "10002"}},
		{"gone", sa, map[string]any{"type": "ISSUE", "issueId": "10003"}},
	} {
		var out struct {
			UUID string `json:"uuid"`
		}
		crashMust(t, "POST", g.Site+"/webapi/share", s.token, s.body, http.StatusCreated, &out)
		shares[s.label] = out.UUID
	}
	crashMust(t, "PUT", g.Site+"/webapi/share/"+shares["board"], sa, map[string]any{"type": "BOARD", "projectId": "P2", "board": map[string]any{"id": "8"}}, http.StatusOK, nil)
	crashMust(t, "DELETE", g.Site+"/webapi/share/"+shares["gone"], sa, nil, http.StatusNoContent, nil)
	delete(shares, "gone")
	for range 2 {
		crashMust(t, "GET", g.Site+"/s/"+shares["board"], "", nil, http.StatusOK, nil)
	}
	crashMust(t, "POST", g.Site+"/s/"+shares["issue"]+"/unlock", "", map[string]any{"password": "wrong"}, http.StatusUnauthorized, nil)
	unlocked := crashMust(t, "POST", g.Site+"/s/"+shares["issue"]+"/unlock", "", map[string]any{"password": "s3cret Ünïcode"}, http.StatusNoContent, nil)
	cookies := (&http.Response{Header: unlocked.header}).Cookies()
	if len(cookies) != 1 {
		t.Fatalf("unlock set %d cookies", len(cookies))
	}
	cookie := cookies[0]

	// The public pages count openings: read before the API on bbolt,
	// after it on PostgreSQL.
	pages := func() map[string]migrateReply {
		out := map[string]migrateReply{}
		for _, label := range []string{"issue", "jql", "carol issue"} {
			out[label] = migrateGet(t, g.Site+"/s/"+shares[label], "", cookie)
		}
		return out
	}
	pagesBefore := pages()
	// The status is read as of now (no sweeper needed): past the expiry
	// on this machine's clock, the server's, it is expired.
	time.Sleep(time.Until(expires.Add(100 * time.Millisecond)))

	snapshot := func() map[string]migrateReply {
		out := map[string]migrateReply{}
		get := func(name, target, token string) { out[name+" "+target] = migrateGet(t, g.Site+target, token, nil) }
		for _, id := range ids {
			get("alice", "/webapi/contracts/"+id, alice)
			get("carl", "/webapi/contracts/"+id, carl)
		}
		var c struct {
			FinalizedPDF, CertificatePDF struct{ URL string }
		}
		if err := json.Unmarshal([]byte(out["alice /webapi/contracts/"+ids["signed"]].Body), &c); err != nil || c.FinalizedPDF.URL == "" || c.CertificatePDF.URL == "" {
			t.Fatalf("the signed contract lists no PDFs: %v %s", err, out["alice /webapi/contracts/"+ids["signed"]].Body)
		}
		for _, u := range []string{c.FinalizedPDF.URL, c.CertificatePDF.URL} {
			get("alice", strings.TrimPrefix(u, g.Site), alice)
		}
		for _, q := range []string{
			"order=creation-date-asc", "statuses=expired&order=name-asc", "statuses=sent|ongoing&order=creation-date-desc",
			"placement=archived", "creator-id=carl&order=name-desc", "substring=" + url.QueryEscape("zoë") + "&order=name-asc",
			"substring=strasse&order=creator-id-asc", "template-id=PAGE-1&page-size=2&page=2&order=creation-date-asc",
		} {
			get("alice", "/webapi/contracts?"+q, alice)
		}
		for _, link := range links {
			get("signer", "/sign/"+link, "")
		}
		for _, id := range shares {
			for name, tok := range map[string]string{"alice": sa, "carol": sc} {
				get(name, "/webapi/share/"+id, tok)
				get(name, "/webapi/share/"+id+"/activity", tok)
			}
		}
		for _, q := range []string{"", "sort=created_at&sortOrder=desc", "sort=opened_count&sortOrder=desc", "projectId=P2", "userId=carol&sort=type", "issueId=10001", "limit=2&offset=1&sort=updated_at"} {
			for name, tok := range map[string]string{"alice": sa, "carol": sc} {
				get(name, "/webapi/share?"+q, tok)
			}
		}
		return out
	}
	before := snapshot()
	for name, r := range before {
		if strings.HasPrefix(name, "signer ") && r.Status != http.StatusOK {
			t.Fatalf("%s answered %d on bbolt: %s", name, r.Status, r.Body)
		}
	}
	keyring := func() (string, map[string]string) {
		var list []map[string]any
		if err := g.AdminJSON("GET", "/webapi/keys", nil, &list); err != nil {
			t.Fatal(err)
		}
		revealed := map[string]string{}
		for _, k := range list {
			var out struct{ Token string }
			if err := g.AdminJSON("POST", "/webapi/keys/"+k["id"].(string)+"/reveal", nil, &out); err != nil {
				t.Fatal(err)
			}
			revealed[k["name"].(string)] = out.Token
		}
		raw, _ := json.Marshal(list)
		return string(raw), revealed
	}
	keysBefore, revealedBefore := keyring()
	for name, tok := range tokens {
		if revealedBefore[name] != tok {
			t.Fatalf("key %s reveals another token on bbolt", name)
		}
	}

	// The move: refused while the gateway runs, done once it is stopped.
	const password = "pgpass-Mv7"
	u, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password) // the test server trusts loopback
	dsnFile := filepath.Join(t.TempDir(), "dsn")
	if err := os.WriteFile(dsnFile, []byte(u.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	migrateCmd := func() (string, string, error) {
		cmd := exec.Command(bin, "webapi", "migrate", "--to", "postgres", "--dsn-file", dsnFile, "--data-dir", dir, "--schema", schema)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if strings.Contains(stdout.String()+stderr.String(), password) {
			t.Errorf("migrate printed the DSN's password:\n%s\n%s", stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String(), err
	}
	if _, stderr, err := migrateCmd(); err == nil || !strings.Contains(stderr, "stop it first") {
		t.Fatalf("migrate of a running gateway: %v\n%s", err, stderr)
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	stdout, stderr, err := migrateCmd()
	if err != nil {
		t.Fatalf("migrate: %v\n%s%s", err, stdout, stderr)
	}
	t.Logf("migrate took %s:\n%s", time.Since(began).Round(time.Millisecond), stdout)
	copied := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z -]+?)  +(\d+)`).FindAllStringSubmatch(stdout, -1) {
		copied[m[1]], _ = strconv.Atoi(m[2])
	}
	for kind, n := range map[string]int{"keys": 5, "templates": 2, "contracts": 6, "attachments": 2, "one-time passwords": 1, "signatures": 1, "shares": 4} {
		if copied[kind] != n {
			t.Errorf("migrate copied %d %s, want %d", copied[kind], kind, n)
		}
	}
	pending := copied["pending messages"]
	if pending < 15 {
		t.Fatalf("%d pending messages copied: the refused mail should wait in the outbox", pending)
	}

	// The same gateway, addresses and master key, on PostgreSQL; the mail
	// server takes mail again.
	ms.FailNext(0)
	err = g.Reconfigure(gatewayproc.Options{Dir: dir, WebAPI: smtp +
		fmt.Sprintf("\n\t\tstorage postgres {\n\t\t\tdsn_file %s\n\t\t\tschema %s\n\t\t}", dsnFile, schema)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "webapi.db"), filepath.Join(dir, "webapi.db.moved")); err != nil {
		t.Fatal(err) // so that nothing can read the bbolt file by mistake
	}
	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	keysAfter, revealedAfter := keyring()
	if keysAfter != keysBefore {
		t.Errorf("keys differ:\nbbolt    %s\npostgres %s", keysBefore, keysAfter)
	}
	for name, tok := range revealedBefore {
		if revealedAfter[name] != tok {
			t.Errorf("key %s reveals another token on postgres", name)
		}
	}
	migrateCompare(t, before, snapshot())
	migrateCompare(t, pagesBefore, pages())

	// The mail that waited goes out, once each; the password in it signs.
	testwait.For(t, 60*time.Second, fmt.Sprintf("the %d waiting messages to be delivered", pending), func() bool { return len(ms.All()) >= pending })
	seen := map[string]bool{}
	code := ""
	for _, m := range ms.All() {
		if seen[m.MessageID] {
			t.Errorf("%s delivered twice", m.MessageID)
		}
		seen[m.MessageID] = true
		if m.To == "zoe@example.com" && strings.HasPrefix(m.Subject, "Your one-time password") {
			code = regexp.MustCompile(`\b\d{6}\b`).FindString(m.Text)
		}
	}
	if len(ms.All()) != pending || code == "" {
		t.Fatalf("delivered %d messages (want %d), one-time password %q", len(ms.All()), pending, code)
	}
	crashMust(t, "POST", g.Site+"/sign/"+sent[0]+"/decision", "", map[string]any{"decision": "signed", "method": "render", "signature": "Zoë Ångström", "otp": code}, http.StatusOK, nil)
	crashMust(t, "POST", g.Site+"/s/"+shares["issue"]+"/unlock", "", map[string]any{"password": "nope"}, http.StatusUnauthorized, nil)
	crashMust(t, "POST", g.Site+"/s/"+shares["issue"]+"/unlock", "", map[string]any{"password": "s3cret Ünïcode"}, http.StatusNoContent, nil)
	crashMust(t, "POST", g.Site+"/s/"+shares["jql"]+"/unlock", "", map[string]any{"password": "jql-pass", "email": "guest@example.com"}, http.StatusNoContent, nil)
	var sh struct{ ID int }
	crashMust(t, "POST", g.Site+"/webapi/share", sa, map[string]any{"type": "ISSUE", "issueId": "10009"}, http.StatusCreated, &sh)
	if sh.ID != 6 {
		t.Errorf("a new share got id %d, want 6: five were given on bbolt", sh.ID)
	}
}

// migrateCompare fails for every answer that differs.
func migrateCompare(t *testing.T, before, after map[string]migrateReply) {
	t.Helper()
	var names []string
	for k := range before {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		b, a := before[k], after[k]
		if b.Status >= 500 {
			t.Errorf("%s answered %d on bbolt: %s", k, b.Status, b.Body)
		}
		if b.Status != a.Status || b.Body != a.Body || fmt.Sprint(b.Headers) != fmt.Sprint(a.Headers) {
			t.Errorf("%s:\nbbolt    %d %v %.1500s\npostgres %d %v %.1500s", k, b.Status, b.Headers, b.Body, a.Status, a.Headers, a.Body)
		}
	}
}
