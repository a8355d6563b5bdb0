package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// crashClient is the clients' HTTP client: bounded, so that a request
// caught by the kill ends as an error (unacknowledged) instead of hanging.
var crashClient = &http.Client{Timeout: 15 * time.Second}

// crashReply is one reply as a client saw it.
type crashReply struct {
	status int
	header http.Header
	body   []byte
}

// crashDo sends a JSON request (body nil for none) with an optional bearer
// token. An error means the client never saw a whole reply.
func crashDo(method, target, token string, body any) (crashReply, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return crashReply{}, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		return crashReply{}, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := crashClient.Do(req)
	if err != nil {
		return crashReply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return crashReply{}, err
	}
	return crashReply{status: resp.StatusCode, header: resp.Header, body: b}, nil
}

// crashMust is crashDo for the checks after restart, where every request
// must get a reply of the given status; it decodes the body into out.
func crashMust(t *testing.T, method, target, token string, body any, status int, out any) crashReply {
	t.Helper()
	r, err := crashDo(method, target, token, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	if r.status != status {
		t.Fatalf("%s %s: %d, want %d: %s", method, target, r.status, status, r.body)
	}
	if out != nil {
		if err := json.Unmarshal(r.body, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, target, err, r.body)
		}
	}
	return r
}

// crashObject decodes a JSON object for comparison; token is left out, as
// only the create reply carries it.
func crashObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	delete(m, "token")
	return m
}

// crashCheckDB opens the data directory's database read-only, as
// `bbolt check` does, and fails the test on any inconsistency. It runs the
// library's Tx.Check with the options the bbolt CLI's check command uses.
// visit, when given, reads the file in the same transaction.
func crashCheckDB(t *testing.T, dir string, visit func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(dir, "webapi.db"), 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open webapi.db after the kill: %v", err)
	}
	defer db.Close()
	err = db.View(func(tx *bbolt.Tx) error {
		n := 0
		for err := range tx.Check() {
			n++
			t.Errorf("bbolt check: %v", err)
		}
		if n > 0 {
			return fmt.Errorf("%d errors", n)
		}
		if visit != nil {
			return visit(tx)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("webapi.db: %v", err)
	}
}

// stopWithEmptyOutbox stops g cleanly (a clean stop finishes what is in
// flight) and checks its file, which must then queue no message; after
// says what had happened before the stop.
func stopWithEmptyOutbox(t *testing.T, g *gatewayproc.Gateway, after string) {
	t.Helper()
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	crashCheckDB(t, g.Dir(), func(tx *bbolt.Tx) error {
		if n := crashOutboxLen(tx); n != 0 {
			t.Errorf("%d messages still queued after %s and a clean stop", n, after)
		}
		return nil
	})
}

// crashAck is a create the client saw answered 201.
type crashAck struct {
	id    string // contract id, share uuid or key id
	token string // keys only
	body  []byte
}

// crashLoad runs fn from n goroutines, each in a loop, until stop closes.
func crashLoad(n int, stop <-chan struct{}, fn func(worker, seq int)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				fn(w, seq)
			}
		}()
	}
	return &wg
}

// TestCrashUnderCreates kills the gateway (SIGKILL) while 18 clients create
// contracts, shares and keys as fast as they can, then checks the bbolt file
// as `bbolt check` does and, after a restart, that every create a client saw
// acknowledged is there as it was answered, and that whatever the lists and
// searches show is whole: readable, counted once, and (keys) usable.
func TestCrashUnderCreates(t *testing.T) {
	g := start(t, gatewayproc.Options{})
	api := prepareAPIs(t, g, "Crash")
	ck, sk := api.contracts, api.share

	kinds := []string{"contract", "share", "key"}
	create := map[string]func(w, seq int) (crashReply, error){
		"contract": func(w, seq int) (crashReply, error) {
			return crashDo("POST", g.Site+"/webapi/contracts", ck.Token, map[string]any{
				"templateId": "PAGE-1", "name": fmt.Sprintf("crash %d-%d", w, seq),
				"signers": []map[string]any{
					{"fullName": fmt.Sprintf("Signer %d-%d", w, seq), "accessKind": "url"},
					{"fullName": "Second Signer", "accessKind": "url"}},
			})
		},
		"share": func(w, seq int) (crashReply, error) {
			return crashDo("POST", g.Site+"/webapi/share", sk.Token, map[string]any{
				"type": "ISSUE", "issueId": fmt.Sprintf("I-%d-%d", w, seq), "projectId": "P" + strconv.Itoa(seq%2),
				"expirationExpression": map[string]int{"days": 30}, "customFields": []map[string]string{{"id": "summary"}},
			})
		},
		"key": func(w, seq int) (crashReply, error) {
			return crashDo("POST", g.Admin+"/webapi/keys", "", map[string]any{
				"service": "contracts", "name": fmt.Sprintf("crash %d-%d", w, seq), "owner": "crashbot",
				"privileges": []string{"search"},
			})
		},
	}

	var mu sync.Mutex
	acked := map[string]map[string]crashAck{"contract": {}, "share": {}, "key": {}}
	cut := map[string]int{}
	var killed atomic.Bool
	stop := make(chan struct{})
	wg := crashLoad(18, stop, func(w, seq int) {
		kind := kinds[w%len(kinds)]
		before := !killed.Load()
		r, err := create[kind](w, seq)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || r.status != http.StatusCreated {
			if err == nil && r.status < 500 {
				t.Errorf("%s create: %d %s", kind, r.status, r.body)
			}
			if before {
				cut[kind]++ // sent before the kill, answered by none
			}
			return
		}
		// A share's id is a number; its name in paths is its uuid.
		var v struct {
			ID          json.RawMessage
			UUID, Token string
		}
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Errorf("%s create reply: %v", kind, err)
			return
		}
		a := crashAck{id: strings.Trim(string(v.ID), `"`), token: v.Token, body: r.body}
		if kind == "share" {
			a.id = v.UUID
		}
		acked[kind][a.id] = a
	})

	// Kill mid-load, once every kind has been acknowledged a few times, so
	// that the kill cannot land before the load has started.
	time.Sleep(1500 * time.Millisecond)
	testwait.For(t, 20*time.Second, "some creates of every kind", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked["contract"]) >= 10 && len(acked["share"]) >= 10 && len(acked["key"]) >= 10
	})
	g.Kill()
	killed.Store(true)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The file as the crash left it: consistent.
	crashCheckDB(t, g.Dir(), nil)

	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}

	found := map[string]map[string]bool{"contract": {}, "share": {}, "key": {}}

	// Contracts: every listed one is whole and is listed once; each index
	// (and its counter, which totalCount may come from) lists the same set.
	for _, filter := range []string{"creator-id=alice", "template-id=PAGE-1", "template-id=PAGE-1&creator-id=alice",
		"statuses=sent", "placement=stacked", "substring=crash", "order=name-asc"} {
		ids := map[string]bool{}
		total := -1
		for page := 1; ; page++ {
			var res struct {
				TotalCount int
				Contracts  []struct{ ID string }
			}
			q := filter + "&page-size=100&page=" + strconv.Itoa(page)
			if !strings.Contains(filter, "order=") {
				q += "&order=creation-date-asc"
			}
			crashMust(t, "GET", g.Site+"/webapi/contracts?"+q, ck.Token, nil, http.StatusOK, &res)
			if total >= 0 && res.TotalCount != total {
				t.Fatalf("%s: totalCount changed from %d to %d between pages", filter, total, res.TotalCount)
			}
			total = res.TotalCount
			if len(res.Contracts) == 0 {
				break
			}
			for _, c := range res.Contracts {
				if ids[c.ID] {
					t.Errorf("%s: contract %s listed twice", filter, c.ID)
				}
				ids[c.ID] = true
			}
		}
		if len(ids) != total {
			t.Errorf("%s: totalCount %d, listed %d", filter, total, len(ids))
		}
		if filter == "creator-id=alice" {
			found["contract"] = ids
		} else if !reflect.DeepEqual(ids, found["contract"]) {
			t.Errorf("search %s lists %d contracts, by creator %d", filter, len(ids), len(found["contract"]))
		}
	}
	for id := range found["contract"] {
		r := crashMust(t, "GET", g.Site+"/webapi/contracts/"+id, ck.Token, nil, http.StatusOK, nil)
		var c struct {
			Name    string
			Signers []struct{ AccessURL string }
		}
		if err := json.Unmarshal(r.body, &c); err != nil || len(c.Signers) != 2 {
			t.Fatalf("contract %s is not whole: %s", id, r.body)
		}
		if a, ok := acked["contract"][id]; ok && !reflect.DeepEqual(crashObject(t, a.body), crashObject(t, r.body)) {
			t.Errorf("contract %s after restart:\n%s\nacknowledged as:\n%s", id, r.body, a.body)
		}
		// Its signing links were written with it.
		for _, s := range c.Signers {
			u, err := url.Parse(s.AccessURL)
			if err != nil {
				t.Fatalf("accessUrl %q", s.AccessURL)
			}
			crashMust(t, "GET", g.Site+u.Path, "", nil, http.StatusOK, nil)
		}
	}

	// Shares: the lists by creator and by project agree, and every listed
	// share is whole.
	listShares := func(filter string) map[string]bool {
		ids := map[string]bool{}
		total := ""
		for offset := 0; ; offset += 1000 {
			var res []struct{ UUID string }
			r := crashMust(t, "GET", g.Site+"/webapi/share?"+filter+"&limit=1000&offset="+strconv.Itoa(offset), sk.Token, nil, http.StatusOK, &res)
			total = r.header.Get("X-Total-Count")
			if len(res) == 0 {
				break
			}
			for _, s := range res {
				if ids[s.UUID] {
					t.Errorf("%s: share %s listed twice", filter, s.UUID)
				}
				ids[s.UUID] = true
			}
		}
		if total != strconv.Itoa(len(ids)) {
			t.Errorf("%s: X-Total-Count %s, listed %d", filter, total, len(ids))
		}
		return ids
	}
	found["share"] = listShares("userId=alice")
	byProject := listShares("projectId=P0")
	for id := range listShares("projectId=P1") {
		byProject[id] = true
	}
	if !reflect.DeepEqual(byProject, found["share"]) {
		t.Errorf("shares by project: %d, by creator: %d", len(byProject), len(found["share"]))
	}
	for id := range found["share"] {
		r := crashMust(t, "GET", g.Site+"/webapi/share/"+id, sk.Token, nil, http.StatusOK, nil)
		if a, ok := acked["share"][id]; ok && !reflect.DeepEqual(crashObject(t, a.body), crashObject(t, r.body)) {
			t.Errorf("share %s after restart:\n%s\nacknowledged as:\n%s", id, r.body, a.body)
		}
	}

	// Keys: every listed key reads back, reveals its token, and the token
	// works; an acknowledged key's token is the one its client was given.
	var keys []struct{ ID, Owner string }
	crashMust(t, "GET", g.Admin+"/webapi/keys?service=contracts", "", nil, http.StatusOK, &keys)
	for _, k := range keys {
		if k.Owner != "crashbot" {
			continue
		}
		if found["key"][k.ID] {
			t.Errorf("key %s listed twice", k.ID)
		}
		found["key"][k.ID] = true
		r := crashMust(t, "GET", g.Admin+"/webapi/keys/"+k.ID, "", nil, http.StatusOK, nil)
		var rev struct{ Token string }
		crashMust(t, "POST", g.Admin+"/webapi/keys/"+k.ID+"/reveal", "", nil, http.StatusOK, &rev)
		if a, ok := acked["key"][k.ID]; ok {
			if !reflect.DeepEqual(crashObject(t, a.body), crashObject(t, r.body)) {
				t.Errorf("key %s after restart:\n%s\nacknowledged as:\n%s", k.ID, r.body, a.body)
			}
			if rev.Token != a.token {
				t.Errorf("key %s reveals another token than it was created with", k.ID)
			}
		}
		crashMust(t, "GET", g.Site+"/webapi/contracts?page-size=1", rev.Token, nil, http.StatusOK, nil)
	}

	// The key count the metrics show is the store's.
	metrics := crashMust(t, "GET", g.Admin+"/metrics", "", nil, http.StatusOK, nil)
	if want := fmt.Sprintf("keygate_keys{service=\"contracts\"} %d\n", len(keys)); !bytes.Contains(metrics.body, []byte(want)) {
		t.Errorf("metrics lack %q", want)
	}

	for _, kind := range kinds {
		missing, extra := 0, 0
		for id := range acked[kind] {
			if !found[kind][id] {
				missing++
				t.Errorf("acknowledged %s %s is gone after the crash", kind, id)
			}
		}
		for id := range found[kind] {
			if _, ok := acked[kind][id]; !ok {
				extra++ // committed, its reply lost to the kill: allowed
			}
		}
		t.Logf("%-8s acknowledged %4d, found %4d (missing %d, committed but unacknowledged %d), cut by the kill %d",
			kind, len(acked[kind]), len(found[kind]), missing, extra, cut[kind])
	}

	// The store goes on: new creates get fresh ids.
	var s struct{ UUID string }
	crashMust(t, "POST", g.Site+"/webapi/share", sk.Token, map[string]any{"type": "ISSUE", "issueId": "after", "projectId": "P0"}, http.StatusCreated, &s)
	if found["share"][s.UUID] {
		t.Errorf("a share created after the restart reuses uuid %s", s.UUID)
	}
	var shares []struct{ ID json.Number }
	crashMust(t, "GET", g.Site+"/webapi/share?userId=alice&limit=1000&sort=id&sortOrder=desc", sk.Token, nil, http.StatusOK, &shares)
	seen := map[json.Number]bool{}
	for _, sh := range shares {
		if seen[sh.ID] {
			t.Errorf("share id %s given twice", sh.ID)
		}
		seen[sh.ID] = true
	}
}

// crashMailKind names a mail by its subject.
func crashMailKind(subject string) string {
	switch {
	case strings.HasPrefix(subject, "Please sign "):
		return "invitation"
	case strings.HasPrefix(subject, "Contract created: "):
		return "created"
	}
	return subject
}

// crashOutboxLen counts the messages queued in the outbox.
func crashOutboxLen(tx *bbolt.Tx) int {
	root := tx.Bucket([]byte("notify_outbox"))
	if root == nil {
		return 0
	}
	msg := root.Bucket([]byte("msg"))
	if msg == nil {
		return 0
	}
	return msg.Stats().KeyN
}

// crashMailbox is where a gateway delivers mail: a slow SMTP server, or
// the .eml files of its data directory when no smtp block is set.
type crashMailbox struct {
	webAPI string
	// offered counts the messages the gateway began to deliver.
	offered func(dir string) int
	// all is every message delivered, once per delivery.
	all func(t *testing.T, dir string) []mailtest.Mail
	// inFlight, when set, says whether a message is being delivered now.
	inFlight func(dir string) bool
}

// crashEML reads the .eml files of a data directory.
func crashEML(t *testing.T, dir string) []mailtest.Mail {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
	var out []mailtest.Mail
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := mailtest.Parse(raw)
		if err != nil {
			t.Fatalf("%s is not a whole message: %v", f, err)
		}
		out = append(out, m)
	}
	return out
}

// crashMailLeftovers lists the files of the mail directory that are not
// delivered messages (a temporary file a crash left behind).
func crashMailLeftovers(dir string) []string {
	entries, _ := os.ReadDir(filepath.Join(dir, "mail"))
	var out []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".eml") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestCrashWithMailInFlight kills the gateway while its outbox delivers
// mail, then restarts it: every queued mail arrives, and at most one
// (recipient, kind) pair twice, under one Message-ID: the message in
// flight, which the server kept but whose acceptance the gateway never
// heard of. With .eml files a redelivery replaces its file, and a file
// half-written at the kill does not stay behind.
func TestCrashWithMailInFlight(t *testing.T) {
	ms := mailtest.Start(t)
	// The server holds each message 50 ms before it answers, so that a
	// message is in flight at the kill.
	ms.SetDelay(50 * time.Millisecond)
	boxes := []struct {
		name string
		box  crashMailbox
	}{
		{"smtp", crashMailbox{
			webAPI:  fmt.Sprintf("smtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}", ms.Addr),
			offered: func(string) int { return ms.Attempts() },
			all:     func(*testing.T, string) []mailtest.Mail { return ms.All() },
		}},
		{"eml", crashMailbox{
			offered: func(dir string) int {
				files, _ := filepath.Glob(filepath.Join(dir, "mail", "*.eml"))
				return len(files)
			},
			all: crashEML,
			// A file is written under a temporary name, then renamed.
			inFlight: func(dir string) bool { return len(crashMailLeftovers(dir)) > 0 },
		}},
	}
	for _, bc := range boxes {
		t.Run(bc.name, func(t *testing.T) { crashMailInFlight(t, bc.box) })
	}
}

func crashMailInFlight(t *testing.T, box crashMailbox) {
	g := start(t, gatewayproc.Options{WebAPI: box.webAPI})
	if err := g.AddTemplate("PAGE-1", "LEGAL", "Crash NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	k, err := g.CreateKey("contracts", "crash mail", "alice", []string{"get", "create"}, nil)
	if err != nil {
		t.Fatal(err)
	}

	// Each contract mails an invitation to each of its two e-mail signers
	// and "created" to its watcher, all to addresses of its own.
	const contracts = 30
	type pair struct{ rcpt, kind string }
	expected := map[pair]bool{}
	for i := 0; i < contracts; i++ {
		a, b, w := fmt.Sprintf("a%d@example.com", i), fmt.Sprintf("b%d@example.com", i), fmt.Sprintf("w%d@example.com", i)
		crashMust(t, "POST", g.Site+"/webapi/contracts", k.Token, map[string]any{
			"templateId": "PAGE-1", "name": fmt.Sprintf("mail %d", i),
			"signers": []map[string]any{
				{"fullName": "A " + strconv.Itoa(i), "accessKind": "email", "email": a},
				{"fullName": "B " + strconv.Itoa(i), "accessKind": "email", "email": b}},
			"watchers": []map[string]any{{"name": "W " + strconv.Itoa(i), "email": w, "notificationKinds": "created"}},
		}, http.StatusCreated, nil)
		expected[pair{a, "invitation"}] = true
		expected[pair{b, "invitation"}] = true
		expected[pair{w, "created"}] = true
	}

	// Kill as soon as 20 messages have been offered (for SMTP the 20th is
	// then inside the server), or, for a mailbox that shows it, as soon
	// after as a message is seen in flight.
	testwait.For(t, 30*time.Second, "20 messages offered", func() bool { return box.offered(g.Dir()) >= 20 })
	for deadline := time.Now().Add(300 * time.Millisecond); box.inFlight != nil && !box.inFlight(g.Dir()) && time.Now().Before(deadline); {
	}
	g.Kill()
	time.Sleep(200 * time.Millisecond) // the server keeps the message in flight
	before := len(box.all(t, g.Dir()))
	leftAtKill := crashMailLeftovers(g.Dir())
	if box.inFlight != nil && len(leftAtKill) == 0 {
		// The window between a temporary file and its rename is too short
		// to hit every time: leave what a kill inside it leaves.
		if err := os.WriteFile(filepath.Join(g.Dir(), "mail", ".tmp-crash"), []byte("Subject: Please sign"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	queued := 0
	crashCheckDB(t, g.Dir(), func(tx *bbolt.Tx) error {
		queued = crashOutboxLen(tx)
		return nil
	})

	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	count := func() map[pair][]mailtest.Mail {
		got := map[pair][]mailtest.Mail{}
		for _, m := range box.all(t, g.Dir()) {
			p := pair{m.To, crashMailKind(m.Subject)}
			got[p] = append(got[p], m)
		}
		return got
	}
	testwait.For(t, 40*time.Second, "every queued mail delivered", func() bool {
		got := count()
		for p := range expected {
			if len(got[p]) == 0 {
				return false
			}
		}
		return true
	})
	// A clean stop finishes what is in flight; then the outbox is empty.
	stopWithEmptyOutbox(t, g, "delivery")
	if left := crashMailLeftovers(g.Dir()); len(left) > 0 {
		t.Errorf("the mail directory keeps what is not a delivered message: %v", left)
	}

	got := count()
	var dups []string
	delivered := 0
	for p, ms := range got {
		delivered += len(ms)
		if !expected[p] {
			t.Errorf("unexpected mail to %s: %s", p.rcpt, p.kind)
		}
		if len(ms) > 1 {
			dups = append(dups, fmt.Sprintf("%s/%s ×%d", p.rcpt, p.kind, len(ms)))
			for _, m := range ms[1:] {
				if m.MessageID == "" || m.MessageID != ms[0].MessageID {
					t.Errorf("%s/%s delivered again under another Message-ID (%q, %q): a second message, not a redelivery", p.rcpt, p.kind, ms[0].MessageID, m.MessageID)
				}
			}
		}
	}
	sort.Strings(dups)
	if len(dups) > 1 || (len(dups) == 1 && !strings.HasSuffix(dups[0], "×2")) {
		t.Errorf("more than the message in flight delivered twice: %v", dups)
	}
	t.Logf("mails expected %d, delivered before the kill %d, queued in webapi.db at the kill %d, delivered in all %d, duplicates %v, temporary files at the kill %v",
		len(expected), before, queued, delivered, dups, leftAtKill)
}

// TestUsageCountsExactAfterCleanStop makes authorized and refused requests
// from many clients with several keys at once, stops the gateway cleanly
// (SIGINT) and restarts it: each key's usageCount is exactly its authorized
// uses, and lastUsageTime is set only on keys that were used. The flush
// interval is an hour, so only the stop can have written the counts; a
// second stop and restart must not count them again.
func TestUsageCountsExactAfterCleanStop(t *testing.T) {
	g := start(t, gatewayproc.Options{FlushInterval: time.Hour})
	keys := []struct {
		name  string
		extra map[string]any
		// allowed says whether the key may search; it may never create.
		allowed bool
	}{
		{"searcher", nil, true},
		{"other address", map[string]any{"allowedIps": []string{"192.0.2.0/24"}}, false},
		{"not yet valid", map[string]any{"notValidBefore": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, false},
	}
	// Each key searches (its use, when allowed) and tries to create and to
	// delete (no privilege: refusals, which must not count).
	requests := []struct {
		method, path string
		body         any
		search       bool
	}{
		{"GET", "/webapi/contracts?page-size=1", nil, true},
		{"POST", "/webapi/contracts", map[string]any{"templateId": "x"}, false},
		{"DELETE", "/webapi/contracts/0190a0a0-0000-7000-8000-000000000000", nil, false},
	}
	const workers, rounds = 8, 30
	ids := make([]string, len(keys))
	authorized := make([]atomic.Int64, len(keys))
	var wg sync.WaitGroup
	for i, kc := range keys {
		k, err := g.CreateKey("contracts", kc.name, "alice", []string{"search"}, kc.extra)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = k.ID
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < rounds; n++ {
					rq := requests[(w+n)%len(requests)]
					r, err := crashDo(rq.method, g.Site+rq.path, k.Token, rq.body)
					if err != nil {
						t.Error(err)
						return
					}
					switch {
					case rq.search && kc.allowed && r.status == http.StatusOK:
						authorized[i].Add(1)
					case (!rq.search || !kc.allowed) && (r.status == http.StatusForbidden || r.status == http.StatusUnauthorized):
					default:
						t.Errorf("%s: %s %s: %d: %s", kc.name, rq.method, rq.path, r.status, r.body)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for restart := 1; restart <= 2; restart++ {
		if err := g.Stop(); err != nil {
			t.Fatal(err)
		}
		if err := g.Restart(); err != nil {
			t.Fatal(err)
		}
		for i, kc := range keys {
			var got struct {
				UsageCount    int64
				LastUsageTime *time.Time
			}
			if err := g.AdminJSON("GET", "/webapi/keys/"+ids[i], nil, &got); err != nil {
				t.Fatal(err)
			}
			want := authorized[i].Load()
			if got.UsageCount != want {
				t.Errorf("%s: usageCount %d after clean stop %d, want %d", kc.name, got.UsageCount, restart, want)
			}
			if used := want > 0; used != (got.LastUsageTime != nil && !got.LastUsageTime.IsZero()) {
				t.Errorf("%s: lastUsageTime %v after %d uses", kc.name, got.LastUsageTime, want)
			}
			t.Logf("stop %d: %-13s requests %d, authorized %d, usageCount %d", restart, kc.name, workers*rounds, want, got.UsageCount)
		}
	}
}
