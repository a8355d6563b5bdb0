package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// TestSecretsStayWhereTheSpecAllows runs the README's flow against the real
// binary, collects every secret it hands out (key tokens, signing links,
// one-time passwords, share passwords, unlock cookies, the SMS shipper's
// token, the master key) and then looks for each, raw and encoded, in
// everything an operator or another client can read: every file of the
// data directory (logs, the bbolt file, the .eml mails), /metrics, every
// reply and every text message. A secret may only be where the docs put
// it: a token in the reply that creates or reveals it, a signing link in
// the creator's contract replies and the mail to its signer, a one-time
// password in the mail or text message to its signer, an unlock cookie in
// the unlock reply. On PostgreSQL the database's rows are swept too, and
// the DSN's password may be nowhere.
func TestSecretsStayWhereTheSpecAllows(t *testing.T) { eachBackend(t, testSecrets) }

func testSecrets(t *testing.T, db *database) {
	sw := &secretSweep{t: t, client: &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}

	// The SMS shipper refuses the first message to each number and every
	// one to Cleo's, echoing it back as a shipper's validation error may:
	// the refusal must not carry the password into a log or the database,
	// and Cleo's stays queued, sealed, until the gateway stops.
	shipperToken := "smsship-" + secretRandom()
	sw.add(&secretItem{kind: "SMS shipper token", value: shipperToken})
	const cleo = "+14155552672"
	sms := &secretShipper{down: map[string]bool{cleo: true}, tries: map[string]int{}}
	shipper := httptest.NewServer(sms)
	defer shipper.Close()
	tokenFile := filepath.Join(t.TempDir(), "sms-token")
	if err := os.WriteFile(tokenFile, []byte(shipperToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if db.password != "" {
		sw.add(&secretItem{kind: "database password", value: db.password})
	}
	// Caddy's autosave.json (the config as loaded) goes into the data
	// directory, so that the sweep reads it too.
	dir := t.TempDir()
	env := append([]string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "share")}, db.env...)
	g := start(t, gatewayproc.Options{Dir: dir, Env: env, WebAPI: db.storage + fmt.Sprintf("\n\t\tsms %s {\n\t\t\ttoken_file %s\n\t\t\tfrom +15550100\n\t\t}", shipper.URL, tokenFile)})
	master, err := os.ReadFile(filepath.Join(g.Dir(), "master.key"))
	if err != nil {
		t.Fatal(err)
	}
	sw.add(&secretItem{kind: "master key", value: string(master)})

	// Keys: create, reveal, list, change, delete; the token is allowed in
	// its create and reveal replies only.
	admin := func(label, method, path, body string) secretReplyData {
		return sw.do(label, method, g.Admin+path, body, nil)
	}
	keyOf := func(label, body string) (id, token string) {
		r := admin(label, "POST", "/webapi/keys", body)
		var k struct{ ID, Token string }
		r.decode(t, http.StatusCreated, &k)
		sw.add(&secretItem{kind: "key token", value: k.Token, allowIn: []string{label, "reveal " + k.ID}})
		return k.ID, k.Token
	}
	cID, cTok := keyOf("create contracts key", `{"service":"contracts","name":"ci","owner":"alice","privileges":["get","search","create","archive","delete"]}`)
	_, sTok := keyOf("create share key", `{"service":"share","name":"portal","owner":"alice","privileges":["get","list","create","delete"],"adminProjects":["*"]}`)
	dID, dTok := keyOf("create doomed key", `{"service":"contracts","name":"doomed","owner":"bob","privileges":["get"]}`)
	_, oTok := keyOf("create other owner's key", `{"service":"contracts","name":"audit","owner":"carol","privileges":["get","search"]}`)
	var revealed struct{ Token string }
	admin("reveal "+cID, "POST", "/webapi/keys/"+cID+"/reveal", "").decode(t, http.StatusOK, &revealed)
	if revealed.Token != cTok {
		t.Fatalf("revealed token differs from the created one")
	}
	admin("list keys", "GET", "/webapi/keys?service=contracts", "")
	admin("show key", "GET", "/webapi/keys/"+cID, "")
	admin("update key", "PATCH", "/webapi/keys/"+cID, `{"description":"used by CI"}`)
	admin("delete key", "DELETE", "/webapi/keys/"+dID, "")
	admin("bad key create", "POST", "/webapi/keys", `{"service":"contracts","name":"","owner":"alice","privileges":["fly"]}`)
	admin("reveal unknown", "POST", "/webapi/keys/nope/reveal", "")
	// An import with the token a key has on another gateway: the token
	// travels in the request only, never in a reply, a log or a refusal.
	imported := "kong-" + secretRandom()
	sw.add(&secretItem{kind: "imported key token", value: imported})
	importBody := func(lines ...string) string {
		b, _ := json.Marshal(map[string]any{"format": "jsonl", "data": strings.Join(lines, "\n")})
		return string(b)
	}
	importLine := `{"service":"share","name":"from kong","owner":"alice","privileges":["get","list"],"token":"` + imported + `"}`
	admin("refused import", "POST", "/webapi/keys/import", importBody(importLine, importLine)).decode(t, http.StatusBadRequest, nil)
	admin("import keys", "POST", "/webapi/keys/import", importBody(importLine)).decode(t, http.StatusOK, nil)
	sw.do("use imported key", "GET", g.Site+"/webapi/share?projectId=1", "", map[string]string{"Authorization": "Bearer " + imported}).decode(t, http.StatusOK, nil)
	// A webhook subscription: its secret (and the key bytes it encodes)
	// is allowed in the create and rotation replies only; a test delivery
	// is signed with both, and the log and list show neither.
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer receiver.Close()
	hookSecret := func(label, secret string) {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
		if !strings.HasPrefix(secret, "whsec_") || err != nil {
			t.Fatalf("%s: secret %q", label, secret)
		}
		sw.add(&secretItem{kind: "webhook secret", value: secret, allowIn: []string{label}})
		sw.add(&secretItem{kind: "webhook secret's key bytes", value: string(key), allowIn: []string{label}})
	}
	var hook struct{ ID, Secret string }
	admin("create webhook", "POST", "/webapi/webhooks", `{"url":"`+receiver.URL+`/hook","events":["contract.signed"]}`).
		decode(t, http.StatusCreated, &hook)
	hookSecret("create webhook", hook.Secret)
	var rotatedHook struct{ Secret string }
	admin("rotate webhook", "POST", "/webapi/webhooks/"+hook.ID+"/rotate-secret", "").decode(t, http.StatusOK, &rotatedHook)
	hookSecret("rotate webhook", rotatedHook.Secret)
	admin("test webhook", "POST", "/webapi/webhooks/"+hook.ID+"/test", "").decode(t, http.StatusAccepted, nil)
	admin("list webhooks", "GET", "/webapi/webhooks", "")
	admin("update webhook", "PATCH", "/webapi/webhooks/"+hook.ID, `{"description":"CRM"}`)
	admin("bad webhook", "POST", "/webapi/webhooks", `{"url":"http://example.com/","events":["nope"]}`)
	testwait.For(t, testwait.Generous, "the test webhook delivered", func() bool {
		return strings.Contains(string(admin("webhook deliveries", "GET", "/webapi/webhooks/"+hook.ID+"/deliveries", "").body), `"status": 204`)
	})

	if err := g.AddTemplate("PAGE-42", "LEGAL", "Mutual NDA", "The parties agree to keep each other's secrets."); err != nil {
		t.Fatal(err)
	}

	// A contract with an e-mail signer, a url signer reached by SMS, and a
	// watcher of everything.
	api := func(label, tok, method, path, body string) secretReplyData {
		h := map[string]string{}
		if tok != "" {
			h["Authorization"] = "Bearer " + tok
		}
		return sw.do(label, method, g.Site+path, body, h)
	}
	var contract struct {
		ID      string
		Signers []struct{ ID, AccessURL string }
	}
	api("contract creator", cTok, "POST", "/webapi/contracts", `{"templateId":"PAGE-42","name":"NDA with ACME",
		"signers":[{"fullName":"Zoë Ångström","accessKind":"email","email":"zoe@example.com"},
			{"fullName":"Bob Brook","accessKind":"url","phone":"+14155552671"}],
		"watchers":[{"name":"Legal","email":"legal@example.com","notificationKinds":"created|opened|signed|completed|completed-contract"}]}`).
		decode(t, http.StatusCreated, &contract)
	if len(contract.Signers) != 2 {
		t.Fatalf("contract signers: %+v", contract.Signers)
	}
	signers := []struct{ link, tok, rcpt string }{{rcpt: "zoe@example.com"}, {rcpt: "+14155552671"}}
	for i := range signers {
		u, err := url.Parse(contract.Signers[i].AccessURL)
		if err != nil || !strings.HasPrefix(u.Path, "/sign/") {
			t.Fatalf("accessUrl %q", contract.Signers[i].AccessURL)
		}
		signers[i].tok = strings.TrimPrefix(u.Path, "/sign/")
		signers[i].link = g.Site + u.Path
		mailTo := ""
		if i == 0 {
			mailTo = signers[i].rcpt // the invitation
		}
		sw.add(&secretItem{kind: "signing token", value: signers[i].tok, rcpt: mailTo,
			allowIn: []string{"contract creator", "signing page " + signers[i].tok}})
	}
	api("contract creator", cTok, "GET", "/webapi/contracts/"+contract.ID, "")
	api("search", cTok, "GET", "/webapi/contracts?substring=zo%C3%AB&order=creation-date-desc", "")
	api("contract for another owner", oTok, "GET", "/webapi/contracts/"+contract.ID, "")

	// Each signer opens the page, asks for a password, gets one wrong, then
	// signs with the right one.
	for i, sg := range signers {
		page := "signing page " + sg.tok
		sw.do(page, "GET", sg.link, "", map[string]string{"Accept": "text/html"})
		sw.do(page, "GET", sg.link, "", map[string]string{"Accept": "application/json"})
		sw.do(page, "POST", sg.link+"/otp", "", map[string]string{"Accept": "application/json"}).decode(t, http.StatusAccepted, nil)
		var otp string
		if i == 0 {
			otp = sw.waitOTPMail(g, sg.rcpt)
		} else {
			otp = sms.waitOTP(t, sg.rcpt, true)
		}
		sw.add(&secretItem{kind: "one-time password", value: otp, rcpt: sg.rcpt})
		n, _ := strconv.Atoi(otp)
		wrong := fmt.Sprintf("%06d", (n+1)%1_000_000)
		asJSON := map[string]string{"Accept": "application/json", "Content-Type": "application/json"}
		sw.do(page, "POST", sg.link+"/decision", `{"decision":"signed","otp":"`+wrong+`","method":"render","signature":"X"}`, asJSON).
			decode(t, http.StatusBadRequest, nil)
		sw.do(page, "POST", sg.link+"/decision", `{"decision":"signed","otp":"`+otp+`","method":"render","signature":"Signed by me"}`, asJSON).
			decode(t, http.StatusOK, nil)
		sw.do(page, "POST", sg.link+"/decision", `{"decision":"signed","otp":"`+otp+`","method":"render","signature":"Again"}`, asJSON)
	}
	sw.do("unknown signing link", "GET", g.Site+"/sign/"+secretRandom(), "", map[string]string{"Accept": "application/json"})

	var signed struct {
		Status                       string
		FinalizedPdf, CertificatePdf struct{ URL string }
	}
	// The documents are sealed right after the last signature.
	testwait.For(t, testwait.Generous, "the signed contract's documents", func() bool {
		api("contract creator", cTok, "GET", "/webapi/contracts/"+contract.ID, "").decode(t, http.StatusOK, &signed)
		return signed.FinalizedPdf.URL != ""
	})
	if signed.Status != "signed" || signed.FinalizedPdf.URL == "" {
		t.Fatalf("contract after both signed: %+v", signed)
	}
	for _, pdf := range []string{signed.FinalizedPdf.URL, signed.CertificatePdf.URL} {
		if u, err := url.Parse(pdf); err == nil {
			api("signed pdf", cTok, "GET", u.Path, "").decode(t, http.StatusOK, nil)
		}
	}

	// Cleo's password never gets through: it waits in the outbox.
	var second struct{ Signers []struct{ AccessURL string } }
	api("contract creator", cTok, "POST", "/webapi/contracts", `{"templateId":"PAGE-42","name":"Second",
		"signers":[{"fullName":"Cleo","accessKind":"url","phone":"`+cleo+`"}]}`).decode(t, http.StatusCreated, &second)
	cleoTok := strings.TrimPrefix(second.Signers[0].AccessURL, g.Site+"/sign/")
	sw.add(&secretItem{kind: "signing token", value: cleoTok, allowIn: []string{"contract creator", "signing page " + cleoTok}})
	sw.do("signing page "+cleoTok, "POST", g.Site+"/sign/"+cleoTok+"/otp", "", map[string]string{"Accept": "application/json"}).
		decode(t, http.StatusAccepted, nil)
	sw.add(&secretItem{kind: "one-time password (undelivered)", value: sms.waitOTP(t, cleo, false), rcpt: cleo})

	// A share with a password: locked, a wrong and the right password, then
	// opened with the cookie; a create that fails must not echo its password.
	password := "pw-" + secretRandom()
	sw.add(&secretItem{kind: "share password", value: password})
	var shared struct{ UUID, URL string }
	api("create share", sTok, "POST", "/webapi/share", `{"type":"ISSUE","issueId":"10001","projectId":"10000","password":"`+password+`",
		"expirationExpression":{"days":30},"customFields":[{"id":"summary"}]}`).decode(t, http.StatusCreated, &shared)
	refused := "pw-" + secretRandom()
	sw.add(&secretItem{kind: "share password (refused create)", value: refused})
	api("bad share", sTok, "POST", "/webapi/share", `{"type":"NOPE","projectId":"x","password":"`+refused+`","expirationExpression":{"days":-1}}`)
	api("list shares", sTok, "GET", "/webapi/share?projectId=10000&sort=created_at&sortOrder=desc", "")
	viewer := g.Site + "/s/" + shared.UUID
	jsonHdr := map[string]string{"Accept": "application/json", "Content-Type": "application/json"}
	sw.do("share page", "GET", viewer, "", map[string]string{"Accept": "application/json"})
	sw.do("share page", "GET", viewer, "", nil)
	sw.do("share unlock", "POST", viewer+"/unlock", `{"password":"not-`+password+`"}`, jsonHdr).decode(t, http.StatusUnauthorized, nil)
	unlock := sw.do("unlock reply", "POST", viewer+"/unlock", `{"password":"`+password+`"}`, jsonHdr)
	var cookie *http.Cookie
	for _, c := range unlock.resp.Cookies() {
		cookie = c
	}
	if cookie == nil {
		t.Fatalf("unlock set no cookie: %d %s", unlock.resp.StatusCode, unlock.body)
	}
	unlockCookie := &secretItem{kind: "unlock cookie", value: cookie.Value, allowIn: []string{"unlock reply"}}
	sw.add(unlockCookie)
	sw.do("share page", "GET", viewer, "", map[string]string{"Accept": "application/json", "Cookie": cookie.Name + "=" + cookie.Value}).
		decode(t, http.StatusOK, nil)
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	sw.do("share unlock", "POST", viewer+"/unlock", "password=not-"+url.QueryEscape(password), form)
	formUnlock := sw.do("form unlock reply", "POST", viewer+"/unlock", "password="+url.QueryEscape(password), form)
	for _, c := range formUnlock.resp.Cookies() {
		if c.Value == cookie.Value { // signed with the same expiry second
			unlockCookie.allowIn = append(unlockCookie.allowIn, "form unlock reply")
		} else {
			sw.add(&secretItem{kind: "unlock cookie", value: c.Value, allowIn: []string{"form unlock reply"}})
		}
	}
	sw.do("share unlock", "POST", viewer+"/unlock", "password="+url.QueryEscape(password), map[string]string{"Content-Type": "text/plain"})

	// Refusals of every kind, with handed-out tokens in the wrong places.
	api("no key", "", "GET", "/webapi/contracts", "")
	sw.do("malformed key", "GET", g.Site+"/webapi/contracts", "", map[string]string{"Authorization": "Bearer " + cTok + " " + sTok})
	sw.do("basic key", "GET", g.Site+"/webapi/contracts", "", map[string]string{"Authorization": "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+cTok))})
	api("deleted key", dTok, "GET", "/webapi/contracts/"+contract.ID, "").decode(t, http.StatusUnauthorized, nil)
	api("wrong service", sTok, "GET", "/webapi/contracts/"+contract.ID, "")
	api("wrong service", cTok, "GET", "/webapi/share?projectId=10000", "")
	api("no privilege", sTok, "PATCH", "/webapi/share/"+shared.UUID, `{}`)
	api("bad json", cTok, "POST", "/webapi/contracts", `{"templateId":`)
	api("bad contract", cTok, "POST", "/webapi/contracts", `{"templateId":"PAGE-42","name":"`+sTok+`","signers":[{"fullName":"x","accessKind":"email","email":"`+cTok+`"}]}`)
	api("not a contract", cTok, "GET", "/webapi/contracts/"+cTok, "")
	api("unknown path", cTok, "GET", "/webapi/contracts/"+contract.ID+"/"+sTok, "")

	// Mails sent at completion, then a clean stop, then the sweep.
	sw.waitMail(g, "legal@example.com", "Signed contract")
	sw.do("config", "GET", g.Admin+"/config/", "", nil)
	metrics := sw.do("metrics", "GET", g.Admin+"/metrics", "", nil)
	if !bytes.Contains(metrics.body, []byte(`keygate_notifications_total{channel="sms",outcome="retry"}`)) {
		t.Fatalf("metrics count no SMS retry, so nothing is known to wait in the outbox")
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	sw.sweep(g.Dir(), db, sms)
}

// secretItem is one secret and the places it may be found.
type secretItem struct {
	kind, value string
	// rcpt may receive it: the To of a mail or text message.
	rcpt string
	// allowIn are the labels of the replies that hand it out.
	allowIn []string
	// seen counts where it was found where allowed, so that the sweep
	// cannot pass by failing to recognise it.
	seen int
}

// find says how data holds the secret, if it does: as is, base64 or hex
// of its bytes, URL-escaped; and where, as a short excerpt with the secret
// masked. One-time passwords are matched only as a whole number, so a
// timestamp's digits are no false alarm.
func (s *secretItem) find(data []byte) (form, excerpt string) {
	forms := []struct{ name, text string }{
		{"as is", s.value},
		{"base64", base64.StdEncoding.EncodeToString([]byte(s.value))},
		{"base64url", base64.RawURLEncoding.EncodeToString([]byte(s.value))},
		{"hex", hex.EncodeToString([]byte(s.value))},
		{"HEX", strings.ToUpper(hex.EncodeToString([]byte(s.value)))},
		{"URL-escaped", url.QueryEscape(s.value)},
	}
	for i, f := range forms {
		f.text = strings.TrimRight(f.text, "=")
		if i > 0 && f.text == s.value {
			continue
		}
		at, n := bytes.Index(data, []byte(f.text)), len(f.text)
		if secretIsOTP.MatchString(s.value) && i == 0 {
			at = -1
			if loc := regexp.MustCompile(`(^|[^0-9.])` + s.value + `($|[^0-9])`).FindIndex(data); loc != nil {
				at = bytes.Index(data[loc[0]:], []byte(s.value)) + loc[0]
			}
		}
		if at < 0 {
			continue
		}
		before := data[max(0, at-60):at]
		after := data[at+n : min(len(data), at+n+60)]
		return f.name, strings.ToValidUTF8(string(before)+"<"+s.kind+">"+string(after), "?")
	}
	return "", ""
}

var secretIsOTP = regexp.MustCompile(`^[0-9]{6}$`)

// secretReplyData is one reply as received: status, headers and body.
type secretReplyData struct {
	label string
	resp  *http.Response
	body  []byte
}

func (r secretReplyData) decode(t *testing.T, status int, out any) {
	t.Helper()
	if r.resp.StatusCode != status {
		t.Fatalf("%s %s: %d, want %d: %s", r.resp.Request.Method, r.resp.Request.URL.Path, r.resp.StatusCode, status, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s: %v: %s", r.label, err, r.body)
		}
	}
}

// raw is the reply as a client could store it.
func (r secretReplyData) raw() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\n", r.resp.Status)
	r.resp.Header.Write(&b)
	b.Write(r.body)
	return b.Bytes()
}

type secretSweep struct {
	t       *testing.T
	client  *http.Client
	secrets []*secretItem
	replies []secretReplyData
}

func (sw *secretSweep) add(s *secretItem) {
	if s.value == "" {
		sw.t.Fatalf("empty %s", s.kind)
	}
	sw.secrets = append(sw.secrets, s)
}

// do sends a request and keeps its reply for the sweep under label.
func (sw *secretSweep) do(label, method, target, body string, headers map[string]string) secretReplyData {
	sw.t.Helper()
	req, err := http.NewRequest(method, target, strings.NewReader(body))
	if err != nil {
		sw.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := sw.client.Do(req)
	if err != nil {
		sw.t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		sw.t.Fatal(err)
	}
	r := secretReplyData{label: label, resp: resp, body: b}
	sw.replies = append(sw.replies, r)
	return r
}

// mails reads the .eml files the gateway has delivered so far.
func (sw *secretSweep) mails(dir string) map[string]mailtest.Mail {
	sw.t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
	out := map[string]mailtest.Mail{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			sw.t.Fatal(err)
		}
		m, err := mailtest.Parse(raw)
		if err != nil {
			sw.t.Fatalf("%s: %v", f, err)
		}
		out[f] = m
	}
	return out
}

func (sw *secretSweep) waitMail(g *gatewayproc.Gateway, to, subject string) mailtest.Mail {
	sw.t.Helper()
	var found mailtest.Mail
	testwait.For(sw.t, 30*time.Second, "a mail to "+to+" about "+subject, func() bool {
		for _, m := range sw.mails(g.Dir()) {
			if m.To == to && strings.HasPrefix(m.Subject, subject) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

var secretOTPInMail = regexp.MustCompile(`password to sign .*? is\s+([0-9]{6})\s`)

func (sw *secretSweep) waitOTPMail(g *gatewayproc.Gateway, to string) string {
	sw.t.Helper()
	m := sw.waitMail(g, to, "Your one-time password")
	match := secretOTPInMail.FindStringSubmatch(strings.ReplaceAll(m.Text, "\n", " "))
	if match == nil {
		sw.t.Fatalf("no password in the mail: %q", m.Text)
	}
	return match[1]
}

// sweep looks for every secret in every place and reports each one found
// where it is not allowed.
func (sw *secretSweep) sweep(dir string, db *database, sms *secretShipper) {
	t := sw.t
	check := func(place string, data []byte, allowed func(*secretItem) bool) {
		for _, s := range sw.secrets {
			form, excerpt := s.find(data)
			switch {
			case form == "":
			case allowed(s):
				s.seen++
			default:
				t.Errorf("%s is in %s (%s): %q", s.kind, place, form, excerpt)
			}
		}
	}
	none := func(*secretItem) bool { return false }

	mails := sw.mails(dir)
	files := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "master.key" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		files++
		m, isMail := mails[path]
		if !isMail {
			check(rel, data, none)
			return nil
		}
		// A mail may hold what belongs to its recipient; its attachments
		// are read as text too.
		toRcpt := func(s *secretItem) bool { return s.rcpt != "" && s.rcpt == m.To }
		check(rel+" (to "+m.To+")", data, toRcpt)
		check(rel+" (text)", []byte(m.Text), toRcpt)
		for name, att := range m.Attachments {
			check(rel+" "+name, att, toRcpt)
			if strings.HasSuffix(name, ".pdf") {
				check(rel+" "+name+" (text)", []byte(pdftest.Read(t, att).Text), toRcpt)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mails) == 0 {
		t.Error("no .eml file was written")
	}

	if db.dump != nil {
		rows := db.dump(t)
		if !bytes.Contains(rows, []byte("contracts:")) || !bytes.Contains(rows, []byte("shares:")) {
			t.Fatalf("the database dump holds no contract or share: %.200q", rows)
		}
		check("the database", rows, none)
	}

	for i, r := range sw.replies {
		place := fmt.Sprintf("reply %d %q (%s %s)", i, r.label, r.resp.Request.Method, r.resp.Request.URL.Path)
		inLabel := func(s *secretItem) bool {
			for _, l := range s.allowIn {
				if l == r.label {
					return true
				}
			}
			return false
		}
		check(place, r.raw(), inLabel)
		if strings.HasPrefix(r.resp.Header.Get("Content-Type"), "application/pdf") {
			check(place+" (text)", []byte(pdftest.Read(t, r.body).Text), inLabel)
		}
	}

	for i, m := range sms.all() {
		check(fmt.Sprintf("text message %d (to %s)", i, m.To), []byte(m.Text), func(s *secretItem) bool { return s.rcpt != "" && s.rcpt == m.To })
	}

	for _, s := range sw.secrets {
		if s.seen == 0 && (s.rcpt != "" || len(s.allowIn) > 0) {
			t.Errorf("%s %.6s… was not found even where it belongs: the sweep cannot recognise it", s.kind, s.value)
		}
	}
	kinds := map[string]int{}
	for _, s := range sw.secrets {
		kinds[s.kind]++
	}
	var list []string
	for k, n := range kinds {
		list = append(list, fmt.Sprintf("%d %s", n, k))
	}
	sort.Strings(list)
	t.Logf("swept %d secrets (%s) through %d files (%d mails), %d replies, %d text messages", len(sw.secrets), strings.Join(list, ", "), files, len(mails), len(sw.replies), len(sms.all()))
}

// secretShipper is the SMS shipper: it refuses the first message to each
// number and every message to the numbers that are down, echoing the
// request, and records every request.
type secretShipper struct {
	mu       sync.Mutex
	down     map[string]bool
	tries    map[string]int
	received []secretSMS
}

type secretSMS struct {
	To, Text  string
	Delivered bool
}

func (s *secretShipper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m secretSMS
	if err := json.Unmarshal(body, &m); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries[m.To]++
	m.Delivered = !s.down[m.To] && s.tries[m.To] > 1
	s.received = append(s.received, m)
	if !m.Delivered {
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, `{"error":"sender not registered","request":%s}`, body)
	}
}

func (s *secretShipper) all() []secretSMS {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]secretSMS(nil), s.received...)
}

var secretOTPInSMS = regexp.MustCompile(`^([0-9]{6}) is your password`)

// waitOTP waits for a password sent to a number, delivered or refused.
func (s *secretShipper) waitOTP(t *testing.T, to string, delivered bool) string {
	t.Helper()
	var otp string
	testwait.For(t, 30*time.Second, "a text message to "+to, func() bool {
		for _, m := range s.all() {
			if match := secretOTPInSMS.FindStringSubmatch(m.Text); m.To == to && m.Delivered == delivered && match != nil {
				otp = match[1]
				return true
			}
		}
		return false
	})
	return otp
}

// secretRandom is a random string that cannot occur by chance.
func secretRandom() string {
	b := make([]byte, 12)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
