package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// cluster is several gateway processes on one PostgreSQL database, with
// one master key and one SMTP server, as an operator runs them behind a
// load balancer (docs/operators.md, "Several instances on one database").
type cluster struct {
	pg    *pgtest.Server
	gws   []*gatewayproc.Gateway
	mails *mailtest.Server
}

// instancesSendTimeout is the gateways' send_timeout: a message taken by
// an instance killed mid-send is sent by another after twice this.
const instancesSendTimeout = 2 * time.Second

// startCluster starts n gateways at once on a server of the test's own
// (the outage test stops it), so that their migrations race as several
// instances starting together do.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	pg, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	keyFile := filepath.Join(t.TempDir(), "master.key")
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &cluster{pg: pg, mails: mailtest.Start(t), gws: make([]*gatewayproc.Gateway, n)}
	webapi := fmt.Sprintf("storage postgres {\n\t\t\tdsn %q\n\t\t}\n\t\tmaster_key_file %s\n\t\tsend_timeout %s\n\t\tsmtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}",
		pg.DSN, keyFile, instancesSendTimeout, c.mails.Addr)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.gws[i], errs[i] = gatewayproc.Start(gatewayproc.Options{Bin: bin, Dir: t.TempDir(), WebAPI: webapi})
		}()
	}
	wg.Wait()
	for i, g := range c.gws {
		if g != nil {
			checkAgainstDocuments(g)
			t.Cleanup(func() {
				if err := g.Stop(); err != nil {
					t.Errorf("instance %d: %v", i, err)
				}
			})
		}
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
	}
	return c
}

// usage is key id's stored count, read from the database.
func (c *cluster) usage(t *testing.T, id string) int64 {
	t.Helper()
	return c.query(t, "SELECT usage_count FROM keygate.keys WHERE id = $1", id)
}

// query reads one integer from the database.
func (c *cluster) query(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, c.pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int64
	if err := conn.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// status is the status of a GET of path on g with token.
func status(t *testing.T, g *gatewayproc.Gateway, token, path string) int {
	t.Helper()
	r, err := crashDo("GET", g.Site+path, token, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.status
}

func TestSeveralInstances(t *testing.T) {
	c := startCluster(t, 3)
	if err := c.gws[0].AddTemplate("PAGE-1", "LEGAL", "NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	const missing = "/webapi/contracts/00000000-0000-4000-8000-000000000000"

	t.Run("a key change on one instance holds on every other within 1 s", func(t *testing.T) {
		k, err := c.gws[0].CreateKey("contracts", "roaming", "alice", []string{"get", "search"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		changed := time.Now()
		for i, g := range c.gws {
			seenWithin(t, changed, time.Second, fmt.Sprintf("created key on instance %d", i), func() bool {
				return status(t, g, k.Token, missing) == http.StatusNotFound
			})
		}
		if err := c.gws[1].AdminJSON("PATCH", "/webapi/keys/"+k.ID, map[string]any{"privileges": []string{"get"}}, nil); err != nil {
			t.Fatal(err)
		}
		changed = time.Now()
		for i, g := range c.gws {
			seenWithin(t, changed, time.Second, fmt.Sprintf("restricted key on instance %d", i), func() bool {
				return status(t, g, k.Token, "/webapi/contracts?substring=x") == http.StatusForbidden
			})
		}
		if err := c.gws[2].AdminJSON("DELETE", "/webapi/keys/"+k.ID, nil, nil); err != nil {
			t.Fatal(err)
		}
		changed = time.Now()
		for i, g := range c.gws {
			seenWithin(t, changed, time.Second, fmt.Sprintf("deleted key on instance %d", i), func() bool {
				return status(t, g, k.Token, missing) == http.StatusUnauthorized
			})
		}
	})

	t.Run("uses spread over the instances count exactly", func(t *testing.T) {
		k, err := c.gws[0].CreateKey("contracts", "counted", "alice", []string{"get"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The polls are uses too, each that the key check let through
		// (404): one per instance, as an instance that does not know the
		// key yet (401) has nothing to count it for. They are counted,
		// not read back from a store that may not have all of them yet.
		var before int64
		for _, g := range c.gws {
			testwait.For(t, testwait.Generous, "key known", func() bool {
				if status(t, g, k.Token, missing) != http.StatusNotFound {
					return false
				}
				before++
				return true
			})
		}
		for i := range 60 {
			if s := status(t, c.gws[i%3], k.Token, missing); s != http.StatusNotFound {
				t.Fatalf("use %d: %d", i, s)
			}
		}
		testwait.For(t, testwait.Generous, fmt.Sprintf("%d uses stored", before+60), func() bool { return c.usage(t, k.ID) >= before+60 })
		// And no more, every instance's flush interval later.
		time.Sleep(2 * time.Second)
		if n := c.usage(t, k.ID); n != before+60 {
			t.Fatalf("stored count %d, want %d", n, before+60)
		}
		// Every admin endpoint shows the sum, whichever instance counted.
		for i, g := range c.gws {
			var got struct {
				UsageCount int64 `json:"usageCount"`
			}
			if err := g.AdminJSON("GET", "/webapi/keys/"+k.ID, nil, &got); err != nil {
				t.Fatal(err)
			}
			if got.UsageCount != before+60 {
				t.Errorf("instance %d shows usageCount %d, want %d", i, got.UsageCount, before+60)
			}
		}
	})

	t.Run("every notification is sent once, by one of the instances", func(t *testing.T) {
		key := clusterKey(t, c, "mailer", "get", "create")
		var want []string
		for i := range 6 {
			name := fmt.Sprintf("Mail test %d", i)
			createContract(t, c.gws[i%3], key, name, fmt.Sprintf("watcher%d@example.com", i), fmt.Sprintf("signer%d@example.com", i))
			want = append(want, fmt.Sprintf("watcher%d@example.com Contract created: “%s”", i, name), fmt.Sprintf("signer%d@example.com Please sign “%s”", i, name))
		}
		c.expectMails(t, want, 0)
	})

	t.Run("kill -9 of one instance during creates loses no acknowledged create and no mail", func(t *testing.T) {
		key := clusterKey(t, c, "crash", "get", "create")
		// The SMTP server answers slowly, so that the kill catches a send.
		c.mails.SetDelay(50 * time.Millisecond)
		defer c.mails.SetDelay(0)
		var mu sync.Mutex
		acked := map[string]string{} // contract id -> name
		stop := make(chan struct{})
		wg := crashLoad(9, stop, func(worker, seq int) {
			name := fmt.Sprintf("Kill %d-%d", worker, seq)
			r, err := crashDo("POST", c.gws[worker%3].Site+"/webapi/contracts", key, contractBody(name, fmt.Sprintf("w%d-%d@example.com", worker, seq), ""))
			if err != nil || r.status != http.StatusCreated {
				return // unacknowledged: the instance died under it
			}
			mu.Lock()
			acked[crashObject(t, r.body)["id"].(string)] = name
			mu.Unlock()
		})
		time.Sleep(700 * time.Millisecond)
		c.gws[2].Kill()
		time.Sleep(700 * time.Millisecond)
		close(stop)
		wg.Wait()
		if err := c.gws[2].Restart(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d creates acknowledged", len(acked))
		var want []string
		for id, name := range acked {
			r := crashMust(t, "GET", c.gws[0].Site+"/webapi/contracts/"+id, key, nil, http.StatusOK, nil)
			if got := crashObject(t, r.body)["name"]; got != name {
				t.Errorf("contract %s: name %v, want %s", id, got, name)
			}
		}
		for _, name := range acked {
			var worker, seq int
			fmt.Sscanf(name, "Kill %d-%d", &worker, &seq)
			want = append(want, fmt.Sprintf("w%d-%d@example.com Contract created: “%s”", worker, seq, name))
		}
		// A mail in flight at the kill may go out twice: sent, but not
		// yet removed from the outbox when the process died.
		c.expectMails(t, want, 1)
	})

	t.Run("signing: the resend rule and the five tries hold across instances", func(t *testing.T) {
		key := clusterKey(t, c, "signing", "get", "create")
		r := createContract(t, c.gws[0], key, "Signed across", "", "eve@example.com")
		var created struct {
			Signers []struct {
				ID        string `json:"id"`
				AccessURL string `json:"accessUrl"`
			} `json:"signers"`
		}
		crashMust(t, "GET", c.gws[0].Site+"/webapi/contracts/"+crashObject(t, r.body)["id"].(string), key, nil, http.StatusOK, &created)
		u, err := url.Parse(created.Signers[0].AccessURL)
		if err != nil {
			t.Fatal(err)
		}
		link := u.Path // the same page on every instance
		sign := func(g *gatewayproc.Gateway, path string, body any) crashReply {
			r, err := crashDo("POST", g.Site+link+path, "", body)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		if r := sign(c.gws[0], "/otp", nil); r.status != http.StatusAccepted {
			t.Fatalf("password request: %d %s", r.status, r.body)
		}
		for i, g := range c.gws[1:] {
			if r := sign(g, "/otp", nil); r.status != http.StatusTooManyRequests {
				t.Errorf("a second request within 60 s on instance %d: %d", i+1, r.status)
			}
		}
		var code string
		testwait.For(t, 20*time.Second, "the password mail", func() bool {
			for _, m := range c.mails.To("eve@example.com", "Your one-time password") {
				if f := strings.Fields(m.Text); len(f) > 0 {
					for _, w := range f {
						if len(w) == 6 && strings.Trim(w, "0123456789") == "" {
							code = w
						}
					}
				}
			}
			return code != ""
		})
		if n := len(c.mails.To("eve@example.com", "Your one-time password")); n != 1 {
			t.Errorf("%d password mails, want 1", n)
		}
		wrong := fmt.Sprintf("%06d", (mustAtoi(t, code)+1)%1000000)
		// Thirty wrong tries at once over the three instances: five are
		// checked (four say how many are left, the fifth voids the
		// password), the rest find it void.
		statuses := make([]int, 30)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := crashDo("POST", c.gws[i%3].Site+link+"/decision", "",
					map[string]any{"decision": "signed", "otp": wrong, "method": "render", "signature": "Eve"})
				if err == nil {
					statuses[i] = r.status
				}
			}()
		}
		wg.Wait()
		count := map[int]int{}
		for _, st := range statuses {
			count[st]++
		}
		if count[http.StatusBadRequest] != 4 || count[http.StatusTooManyRequests] != len(statuses)-4 {
			t.Errorf("%d parallel wrong tries over three instances: %v, want 4 × 400 and the rest 429", len(statuses), count)
		}
		// Checked tries are counted; one more than five would have been a
		// sixth guess.
		if n := c.query(t, "SELECT failures FROM keygate.signing_otps WHERE signer_id = $1", created.Signers[0].ID); n != 5 {
			t.Errorf("%d tries checked, want 5", n)
		}
		if r := sign(c.gws[2], "/decision", map[string]any{"decision": "signed", "otp": code, "method": "render", "signature": "Eve"}); r.status != http.StatusTooManyRequests {
			t.Errorf("the right password after five wrong ones: %d, want 429", r.status)
		}
	})

	t.Run("share pages: one unlock limit, cookies and openings across instances", func(t *testing.T) {
		k, err := c.gws[0].CreateKey("share", "pages", "alice", []string{"get", "create"}, map[string]any{"adminProjects": []string{"*"}})
		if err != nil {
			t.Fatal(err)
		}
		for i, g := range c.gws {
			testwait.For(t, testwait.Generous, fmt.Sprintf("share key on instance %d", i), func() bool {
				r, err := crashDo("GET", g.Site+"/webapi/share/00000000-0000-4000-8000-000000000000", k.Token, nil)
				return err == nil && r.status == http.StatusNotFound
			})
		}
		newShare := func(password string) string {
			body := map[string]any{"type": "ISSUE", "issueId": "10001", "projectId": "10000", "customFields": []map[string]any{{"id": "summary"}}}
			if password != "" {
				body["password"] = password
			}
			r := crashMust(t, "POST", c.gws[0].Site+"/webapi/share", k.Token, body, http.StatusCreated, nil)
			return crashObject(t, r.body)["uuid"].(string)
		}
		page := func(g *gatewayproc.Gateway, method, uuid, body string, cookies []*http.Cookie) *http.Response {
			t.Helper()
			target := g.Site + "/s/" + uuid
			if method == "POST" {
				target += "/unlock"
			}
			req, err := http.NewRequest(method, target, strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Accept", "application/json")
			req.Header.Set("Content-Type", "application/json")
			for _, ck := range cookies {
				req.AddCookie(ck)
			}
			resp, err := crashClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp
		}

		// Wrong passwords spread over the instances spend one allowance:
		// five, then 429 on whichever instance.
		guarded := newShare("s3cret-one")
		for i := range 5 {
			if r := page(c.gws[i%3], "POST", guarded, `{"password":"wrong"}`, nil); r.StatusCode != http.StatusUnauthorized {
				t.Fatalf("wrong password %d: %d", i+1, r.StatusCode)
			}
		}
		for i, g := range c.gws {
			if r := page(g, "POST", guarded, `{"password":"s3cret-one"}`, nil); r.StatusCode != http.StatusTooManyRequests {
				t.Errorf("instance %d after five wrong passwords: %d, want 429", i, r.StatusCode)
			}
		}

		// An unlock cookie of one instance opens the page on every other.
		open := newShare("s3cret-two")
		r := page(c.gws[1], "POST", open, `{"password":"s3cret-two"}`, nil)
		if r.StatusCode != http.StatusNoContent || len(r.Cookies()) == 0 {
			t.Fatalf("unlock: %d, cookies %v", r.StatusCode, r.Cookies())
		}
		cookies := r.Cookies()
		for i, g := range c.gws {
			if r := page(g, "GET", open, "", cookies); r.StatusCode != http.StatusOK {
				t.Errorf("instance %d with the cookie: %d", i, r.StatusCode)
			}
			if r := page(g, "GET", open, "", nil); r.StatusCode != http.StatusUnauthorized {
				t.Errorf("instance %d without a cookie: %d", i, r.StatusCode)
			}
		}

		// Openings through every instance add up exactly (the three above
		// with the cookie included).
		for i := range 27 {
			if r := page(c.gws[i%3], "GET", open, "", cookies); r.StatusCode != http.StatusOK {
				t.Fatalf("opening %d: %d", i, r.StatusCode)
			}
		}
		opened := func() float64 {
			r := crashMust(t, "GET", c.gws[2].Site+"/webapi/share/"+open, k.Token, nil, http.StatusOK, nil)
			n, _ := crashObject(t, r.body)["openedCount"].(float64)
			return n
		}
		testwait.For(t, testwait.Generous, "30 openings counted", func() bool { return opened() >= 30 })
		time.Sleep(2 * time.Second)
		if n := opened(); n != 30 {
			t.Errorf("openedCount %v, want 30", n)
		}
	})

	t.Run("a database outage answers 503 and heals without a restart", func(t *testing.T) {
		key := clusterKey(t, c, "outage", "get", "create")
		uses := 0
		get := func(g *gatewayproc.Gateway, path string) crashReply {
			t.Helper()
			uses++
			r, err := crashDo("GET", g.Site+path, key, nil)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		id := crashObject(t, createContract(t, c.gws[0], key, "Outage", "", "").body)["id"].(string)
		// Uses from here on are counted; those before are stored first:
		// clusterKey's polls (clusterKeyUses) and the create.
		base := int64(clusterKeyUses(c) + 1)
		testwait.For(t, testwait.Generous, fmt.Sprintf("the %d uses before the outage stored", base), func() bool {
			return c.usage(t, keyID(t, c, key)) >= base
		})
		if n := c.usage(t, keyID(t, c, key)); n != base {
			t.Fatalf("stored count %d before the outage, want %d", n, base)
		}
		if err := c.pg.Halt(); err != nil {
			t.Fatal(err)
		}
		for i, g := range c.gws {
			start := time.Now()
			r := get(g, "/webapi/contracts/"+id)
			took := time.Since(start)
			faultProblem(t, fmt.Sprintf("instance %d with the database down", i), r, http.StatusServiceUnavailable, "unavailable")
			if took > 5*time.Second {
				t.Errorf("instance %d answered after %s, want within 5 s", i, took)
			}
			t.Logf("instance %d: 503 after %s", i, took)
			// The key check answers from memory.
			if r := status(t, g, "kg_"+strings.Repeat("A", 43), "/webapi/contracts/"+id); r != http.StatusUnauthorized {
				t.Errorf("instance %d: an unknown key got %d with the database down", i, r)
			}
		}
		r, err := crashDo("GET", c.gws[0].Admin+"/metrics", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		metrics := string(r.body)
		if !strings.Contains(metrics, "keygate_database_unavailable_total") || strings.Contains(metrics, "keygate_database_unavailable_total 0\n") {
			t.Errorf("the metrics do not show the outage:\n%s", grepLines(metrics, "keygate_database"))
		}
		if err := c.pg.Resume(); err != nil {
			t.Fatal(err)
		}
		testwait.For(t, 30*time.Second, "serving again", func() bool { return get(c.gws[0], "/webapi/contracts/"+id).status == http.StatusOK })

		// A database that does not answer at all (a lost network): the
		// request gives up within 5 s instead of hanging.
		if err := c.pg.Freeze(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		r = get(c.gws[1], "/webapi/contracts/"+id)
		took := time.Since(start)
		if err := c.pg.Thaw(); err != nil {
			t.Fatal(err)
		}
		faultProblem(t, "a database that does not answer", r, http.StatusServiceUnavailable, "unavailable")
		if took > 5*time.Second {
			t.Errorf("answered after %s, want within 5 s", took)
		}
		t.Logf("frozen database: 503 after %s", took)
		for i, g := range c.gws {
			testwait.For(t, 30*time.Second, fmt.Sprintf("instance %d serving again", i), func() bool {
				return get(g, "/webapi/contracts/"+id).status == http.StatusOK
			})
			createContract(t, g, key, fmt.Sprintf("After the outage %d", i), "", "")
			uses++
		}
		// Uses counted while the database was down were kept and written.
		testwait.For(t, testwait.Generous, "every use stored", func() bool { return c.usage(t, keyID(t, c, key)) == base+int64(uses) })
		// Each instance listens again (a lost listener tries again a
		// second later): a key change reaches the others by NOTIFY, within
		// 1 s, where the resync every 30 s would bring it only later.
		time.Sleep(2 * time.Second)
		k, err := c.gws[1].CreateKey("contracts", "after outage", "alice", []string{"get"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		for i, g := range c.gws {
			seenWithin(t, created, time.Second, fmt.Sprintf("key created after the outage on instance %d", i), func() bool {
				return status(t, g, k.Token, missing) == http.StatusNotFound
			})
		}
	})
}

// seenWithin polls cond until it holds, as testwait.For with
// testwait.Generous, and fails if a poll sent more than bound after since
// (the reply of the change that cond waits for) still finds it false.
// A poll sent earlier proves nothing however late its answer comes: the
// server may have answered it at once.
func seenWithin(t *testing.T, since time.Time, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	late := false
	testwait.For(t, testwait.Generous, what, func() bool {
		asked := time.Now()
		if cond() {
			t.Logf("%s: shown to a poll sent %s after the change's reply", what, asked.Sub(since).Round(time.Millisecond))
			return true
		}
		if !late && asked.Sub(since) > bound {
			late = true
			t.Errorf("%s: not shown to a poll sent %s after the change's reply, want within %s", what, asked.Sub(since).Round(time.Millisecond), bound)
		}
		return false
	})
}

// clusterKey creates a contracts key on the first instance and waits
// until every instance checks it; it returns the token. Its polls use the
// key clusterKeyUses times.
func clusterKey(t *testing.T, c *cluster, name string, privileges ...string) string {
	t.Helper()
	k, err := c.gws[0].CreateKey("contracts", name, "alice", privileges, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range c.gws {
		testwait.For(t, testwait.Generous, fmt.Sprintf("key %s on instance %d", name, i), func() bool {
			r, err := crashDo("GET", g.Site+"/webapi/contracts/00000000-0000-4000-8000-000000000000", k.Token, nil)
			return err == nil && r.status == http.StatusNotFound
		})
	}
	keyIDs.Store(k.Token, k.ID)
	return k.Token
}

// clusterKeyUses is how many uses clusterKey's polls count for its key:
// one on each instance, the first 404 that ends its polls there (an
// instance that does not know the key yet answers 401 and counts none).
func clusterKeyUses(c *cluster) int { return len(c.gws) }

// keyIDs maps the tokens clusterKey made to their key ids.
var keyIDs sync.Map

func keyID(t *testing.T, _ *cluster, token string) string {
	t.Helper()
	id, ok := keyIDs.Load(token)
	if !ok {
		t.Fatal("not a token of clusterKey")
	}
	return id.(string)
}

// contractBody is a contract of template PAGE-1 named name, with a
// watcher told of its creation and a signer invited by e-mail when their
// addresses are given, else one signer by link.
func contractBody(name, watcher, signer string) map[string]any {
	body := map[string]any{"templateId": "PAGE-1", "name": name,
		"signers": []map[string]any{{"fullName": "Sam Signer", "accessKind": "url"}}}
	if signer != "" {
		body["signers"] = []map[string]any{{"fullName": "Sam Signer", "accessKind": "email", "email": signer}}
	}
	if watcher != "" {
		body["watchers"] = []map[string]any{{"name": "Legal", "email": watcher, "notificationKinds": "created"}}
	}
	return body
}

func createContract(t *testing.T, g *gatewayproc.Gateway, token, name, watcher, signer string) crashReply {
	t.Helper()
	return crashMust(t, "POST", g.Site+"/webapi/contracts", token, contractBody(name, watcher, signer), http.StatusCreated, nil)
}

// expectMails waits until every mail of want ("recipient subject") has
// arrived, then a while longer, and fails on any that is missing or sent
// more often than once, allowing dups extra copies in all.
func (c *cluster) expectMails(t *testing.T, want []string, dups int) {
	t.Helper()
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w] = true
	}
	count := func() map[string]int {
		got := map[string]int{}
		for _, m := range c.mails.All() {
			if k := m.To + " " + m.Subject; wanted[k] {
				got[k]++
			}
		}
		return got
	}
	// A message taken by an instance that died is sent once its lease
	// (twice send_timeout) has passed.
	testwait.For(t, 30*time.Second, fmt.Sprintf("%d mails", len(want)), func() bool { return len(count()) == len(wanted) })
	time.Sleep(2 * instancesSendTimeout)
	extra := 0
	for k, n := range count() {
		if n > 1 {
			t.Logf("%q sent %d times", k, n)
			extra += n - 1
		}
	}
	if extra > dups {
		t.Errorf("%d mails sent more than once, at most %d allowed", extra, dups)
	}
}

// grepLines are the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSealCertificateShared: instances on one PostgreSQL seal with one
// self-made certificate, made by whichever started first, and a restart
// keeps it.
func TestSealCertificateShared(t *testing.T) {
	c := startCluster(t, 2)
	fingerprint := func(g *gatewayproc.Gateway) string {
		var seal struct{ SHA256 string }
		if err := g.AdminJSON("GET", "/webapi/seal", nil, &seal); err != nil {
			t.Fatal(err)
		}
		return seal.SHA256
	}
	first := fingerprint(c.gws[0])
	if first == "" || fingerprint(c.gws[1]) != first {
		t.Fatalf("the instances seal with %q and %q", first, fingerprint(c.gws[1]))
	}
	if err := c.gws[1].Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.gws[1].Restart(); err != nil {
		t.Fatal(err)
	}
	if got := fingerprint(c.gws[1]); got != first {
		t.Errorf("after a restart: %q, want %q", got, first)
	}
}
