package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/keygate/keygate/internal/testkit/freeport"
	"github.com/keygate/keygate/internal/testkit/gatewayproc"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/pgtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// faultMountTmpfs mounts a tmpfs of size bytes on dir for the test, or
// skips the test with the reason when it cannot (not root, no mount).
func faultMountTmpfs(t *testing.T, dir string, size int64, opts ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs as the data directory; run the e2e tests as root to cover this")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	o := strings.Join(append([]string{"size=" + strconv.FormatInt(size, 10), "mode=0700"}, opts...), ",")
	if b, err := exec.Command("mount", "-t", "tmpfs", "-o", o, "keygate-test", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs on %s (%v: %s); skipping", dir, err, strings.TrimSpace(string(b)))
	}
	t.Cleanup(func() {
		if b, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			// Still busy (a gateway that did not stop): detach it.
			if b2, err2 := exec.Command("umount", "-l", dir).CombinedOutput(); err2 != nil {
				t.Errorf("umount %s: %v %s; umount -l: %v %s", dir, err, b, err2, b2)
			}
		}
	})
}

// faultFill writes a ballast file into dir until the file system is full.
func faultFill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for size := len(buf); size > 0; {
		if _, err := f.Write(buf[:size]); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			size /= 2 // down to the last byte
		}
	}
	return path
}

// faultProblem checks that r is the problem body of status and code, with
// a Retry-After, saying nothing of the inside.
func faultProblem(t *testing.T, what string, r crashReply, status int, code string, inside ...string) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: %d, want %d: %s", what, r.status, status, r.body)
		return
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("%s: Content-Type %q", what, ct)
	}
	var p struct {
		Status int
		Code   string
	}
	if err := json.Unmarshal(r.body, &p); err != nil || p.Status != status || p.Code != code {
		t.Errorf("%s: body %s, want status %d code %s", what, r.body, status, code)
	}
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra <= 0 {
		t.Errorf("%s: Retry-After %q, want seconds", what, r.header.Get("Retry-After"))
	}
	for _, s := range inside {
		if strings.Contains(strings.ToLower(string(r.body)), strings.ToLower(s)) {
			t.Errorf("%s: the body tells of the inside (%q): %s", what, s, r.body)
		}
	}
}

// TestDiskFull runs the gateway on a data directory that is a small
// tmpfs, fills it, and checks what clients see: every create (contract,
// share, key, template) is refused with a 507 insufficient_storage
// problem and a Retry-After, or stored whole if it still fits, never a
// 500 or a hang; reads, searches, lists and the key check go on. Once the
// ballast is gone, creates work again without a restart, and after a clean
// stop the file passes bbolt's check and holds everything acknowledged,
// with exact usage counts (kept in memory while the disk was full). A
// mail queued before the disk filled is delivered while it is full, once:
// when its removal from the outbox fails for want of space, it is not
// sent again.
func TestDiskFull(t *testing.T) {
	// The default Caddyfile keeps the audit log in the data directory too:
	// a full disk then also stops the logs.
	for _, where := range []string{"data only", "data and logs"} {
		t.Run(where, func(t *testing.T) { faultDiskFull(t, where == "data and logs") })
	}
}

func faultDiskFull(t *testing.T, logsToo bool) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	faultMountTmpfs(t, data, 8<<20)
	ms := mailtest.Start(t)
	ms.FailNext(1 << 30)
	o := gatewayproc.Options{Dir: dir, DataDir: data}
	if logsToo {
		o = gatewayproc.Options{Dir: data, AuditOutput: "buffered_file"}
	}
	o.WebAPI = fmt.Sprintf("smtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}", ms.Addr)
	g := start(t, o)
	api := prepareAPIs(t, g, "Full")
	ck, sk := api.contracts, api.share
	uses := 0 // authorized uses of ck
	kinds := []string{"contract", "share", "key", "template"}
	big := strings.Repeat("Keep each other's secrets. ", 600) // 16 KiB: a template needs fresh pages
	create := func(kind string, n int) crashReply {
		var r crashReply
		var err error
		switch kind {
		case "contract":
			uses++
			r, err = crashDo("POST", g.Site+"/webapi/contracts", ck.Token, map[string]any{
				"templateId": "PAGE-1", "name": fmt.Sprintf("full %d", n),
				"signers": []map[string]any{{"fullName": "Signer " + strconv.Itoa(n), "accessKind": "url"}},
			})
		case "share":
			r, err = crashDo("POST", g.Site+"/webapi/share", sk.Token, map[string]any{
				"type": "ISSUE", "issueId": "I-" + strconv.Itoa(n), "projectId": "P1",
			})
		case "key":
			r, err = crashDo("POST", g.Admin+"/webapi/keys", "", map[string]any{
				"service": "contracts", "name": fmt.Sprintf("full %d", n), "owner": "fullbot", "privileges": []string{"search"},
				"description": strings.Repeat("d", 4000), // a page of its own
			})
		case "template":
			r, err = crashDo("POST", g.Admin+"/webapi/templates", "", map[string]any{
				"id": "FULL-" + strconv.Itoa(n), "collectionId": "LEGAL", "title": fmt.Sprintf("Full %d", n), "body": big,
			})
		}
		if err != nil {
			t.Fatalf("%s create: %v", kind, err)
		}
		return r
	}
	// acked are the creates answered 201, by kind: the id to read back.
	acked := map[string][]string{}
	ack := func(kind string, r crashReply) {
		var v struct {
			ID   json.RawMessage
			UUID string
		}
		if err := json.Unmarshal(r.body, &v); err != nil {
			t.Fatalf("%s create reply: %v: %s", kind, err, r.body)
		}
		id := strings.Trim(string(v.ID), `"`)
		if kind == "share" {
			id = v.UUID
		}
		acked[kind] = append(acked[kind], id)
	}
	n := 0
	for _, kind := range kinds {
		for i := 0; i < 3; i++ {
			n++
			r := create(kind, n)
			if r.status != http.StatusCreated {
				t.Fatalf("%s create before the disk is full: %d %s", kind, r.status, r.body)
			}
			ack(kind, r)
		}
	}

	// A mail queued before the disk fills: the server refuses it for now.
	const rcpt = "full-mail@example.com"
	uses++
	var mailed struct {
		Signers []struct{ AccessURL string }
	}
	r := crashMust(t, "POST", g.Site+"/webapi/contracts", ck.Token, map[string]any{
		"templateId": "PAGE-1", "name": "full mail",
		"signers": []map[string]any{{"fullName": "Mail Signer", "accessKind": "email", "email": rcpt}},
	}, http.StatusCreated, &mailed)
	ack("contract", r)
	signURL, err := url.Parse(mailed.Signers[0].AccessURL)
	if err != nil || len(mailed.Signers) != 1 {
		t.Fatalf("accessUrl of %s", r.body)
	}
	testwait.For(t, 10*time.Second, "a first attempt at the mail", func() bool { return ms.Attempts() > 0 })

	ballast := faultFill(t, data)
	ms.FailNext(0)

	// While full: each create is refused with a 507 or, if it fits in
	// pages the file already has, stored; reads go on.
	refused := map[string]int{}
	opens := 0 // of the first share's public page
	var slowest time.Duration
	// At least 10 rounds, and on until every kind has been refused (a
	// small record may fit in pages the file already has).
	allRefused := func() bool {
		for _, kind := range kinds {
			if refused[kind] == 0 {
				return false
			}
		}
		return true
	}
	rounds := 0
	for ; rounds < 10 || (!allRefused() && rounds < 40); rounds++ {
		for _, kind := range kinds {
			n++
			began := time.Now()
			r := create(kind, n)
			slowest = max(slowest, time.Since(began))
			switch r.status {
			case http.StatusCreated:
				ack(kind, r)
			default:
				faultProblem(t, kind+" create on a full disk", r, http.StatusInsufficientStorage, "insufficient_storage",
					data, "webapi.db", "no space", "errno", "device")
				refused[kind]++
			}
		}
		// Reads, searches and lists, through the key check.
		var page struct{ TotalCount int }
		uses++
		crashMust(t, "GET", g.Site+"/webapi/contracts?creator-id=alice&page-size=1", ck.Token, nil, http.StatusOK, &page)
		if page.TotalCount != len(acked["contract"]) {
			t.Errorf("search on a full disk: totalCount %d, acknowledged %d", page.TotalCount, len(acked["contract"]))
		}
		uses++
		crashMust(t, "GET", g.Site+"/webapi/contracts/"+acked["contract"][0], ck.Token, nil, http.StatusOK, nil)
		r := crashMust(t, "GET", g.Site+"/webapi/share?projectId=P1&limit=100", sk.Token, nil, http.StatusOK, nil)
		if got := r.header.Get("X-Total-Count"); got != strconv.Itoa(len(acked["share"])) {
			t.Errorf("share list on a full disk: X-Total-Count %s, acknowledged %d", got, len(acked["share"]))
		}
		var keys []struct{ Owner string }
		crashMust(t, "GET", g.Admin+"/webapi/keys?service=contracts", "", nil, http.StatusOK, &keys)
		bots := 0
		for _, k := range keys {
			if k.Owner == "fullbot" {
				bots++
			}
		}
		if bots != len(acked["key"]) {
			t.Errorf("key list on a full disk: %d keys, acknowledged %d", bots, len(acked["key"]))
		}
		var tpls []json.RawMessage
		crashMust(t, "GET", g.Admin+"/webapi/templates", "", nil, http.StatusOK, &tpls)
		if len(tpls) != 1+len(acked["template"]) {
			t.Errorf("template list on a full disk: %d, acknowledged %d", len(tpls), 1+len(acked["template"]))
		}
		// The public share page opens; the opening waits in memory.
		crashMust(t, "GET", g.Site+"/s/"+acked["share"][0], "", nil, http.StatusOK, nil)
		opens++
		// A key the gateway does not know is still refused.
		crashMust(t, "GET", g.Site+"/webapi/contracts?page-size=1", "kg_"+strings.Repeat("A", 43), nil, http.StatusUnauthorized, nil)
	}
	if t.Failed() {
		t.FailNow()
	}
	// Small records may still fit in pages the file already has; the
	// contract, share and key records (a 4000-character description) and
	// a 16 KiB template need new ones at least some of the time.
	for _, kind := range kinds {
		if refused[kind] == 0 {
			t.Errorf("no %s create was refused on a full disk: is it full?", kind)
		}
	}
	if slowest > 5*time.Second {
		t.Errorf("a create on a full disk took %s to be answered", slowest)
	}
	// A signer asks for a one-time password: it is stored and mailed, or
	// refused as the creates are.
	otp, err := crashDo("POST", g.Site+signURL.Path+"/otp", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if otp.status != http.StatusAccepted {
		faultProblem(t, "one-time password on a full disk", otp, http.StatusInsufficientStorage, "insufficient_storage",
			data, "webapi.db", "no space", "device")
	}
	// The queued mail goes out while the disk is full, and only once,
	// though its removal from the outbox may fail meanwhile.
	testwait.For(t, 20*time.Second, "the queued mail delivered on a full disk", func() bool { return len(ms.To(rcpt, "Please sign")) > 0 })
	time.Sleep(3 * time.Second)
	if n := len(ms.To(rcpt, "Please sign")); n != 1 {
		t.Errorf("the mail queued before the disk filled was delivered %d times while it was full", n)
	}
	logged, _ := os.ReadFile(filepath.Join(o.Dir, "caddy.log"))
	keptQueued := strings.Count(string(logged), "was delivered but stays queued")
	flushFailed := strings.Count(string(logged), "flushing key usage") + strings.Count(string(logged), "flushing share openings")

	// Space returns: creates work again, at once, without a restart.
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	recovered := time.Now()
	for _, kind := range kinds {
		n++
		r := create(kind, n)
		if r.status != http.StatusCreated {
			t.Errorf("%s create once space returned: %d %s", kind, r.status, r.body)
			continue
		}
		ack(kind, r)
	}
	if t.Failed() {
		t.FailNow()
	}
	if otp.status != http.StatusAccepted {
		crashMust(t, "POST", g.Site+signURL.Path+"/otp", "", nil, http.StatusAccepted, nil)
	}
	// The audit log goes on too (when it shares the disk, it lost the
	// entries of the full spell).
	ak, err := g.CreateKey("contracts", "audit after full", "alice", []string{"search"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	crashMust(t, "GET", g.Site+"/webapi/contracts?page-size=1", ak.Token, nil, http.StatusOK, nil)
	testwait.For(t, testwait.Generous, "the audit log writes again once the disk has room", func() bool {
		b, _ := os.ReadFile(filepath.Join(o.Dir, "audit.log"))
		return strings.Contains(string(b), `"key_id":"`+ak.ID+`"`)
	})
	t.Logf("on the full disk, of %d creates each: refused %v (507), slowest reply %s; a one-time password request: %d; usage and openings flushes that failed: %d; removals of a delivered mail that failed: %d; after the ballast went, every kind stored again within %s",
		rounds, refused, slowest.Round(time.Millisecond), otp.status, flushFailed, keptQueued, time.Since(recovered).Round(time.Millisecond))

	// After a clean stop the file is consistent, and everything
	// acknowledged is there with the exact usage count.
	stopWithEmptyOutbox(t, g, "the disk had room")
	if n := len(ms.To(rcpt, "Please sign")); n != 1 {
		t.Errorf("the mail queued before the disk filled was delivered %d times", n)
	}
	if err := g.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, id := range acked["contract"] {
		uses++
		crashMust(t, "GET", g.Site+"/webapi/contracts/"+id, ck.Token, nil, http.StatusOK, nil)
	}
	for _, id := range acked["share"] {
		crashMust(t, "GET", g.Site+"/webapi/share/"+id, sk.Token, nil, http.StatusOK, nil)
	}
	for _, id := range acked["key"] {
		crashMust(t, "GET", g.Admin+"/webapi/keys/"+id, "", nil, http.StatusOK, nil)
	}
	for _, id := range acked["template"] {
		crashMust(t, "GET", g.Admin+"/webapi/templates/"+id, "", nil, http.StatusOK, nil)
	}
	var page struct{ TotalCount int }
	uses++
	crashMust(t, "GET", g.Site+"/webapi/contracts?creator-id=alice&page-size=1", ck.Token, nil, http.StatusOK, &page)
	if page.TotalCount != len(acked["contract"]) {
		t.Errorf("after restart: %d contracts, acknowledged %d", page.TotalCount, len(acked["contract"]))
	}
	var sh struct{ OpenedCount int }
	crashMust(t, "GET", g.Site+"/webapi/share/"+acked["share"][0], sk.Token, nil, http.StatusOK, &sh)
	if sh.OpenedCount != opens {
		t.Errorf("openedCount %d after the full disk and a restart, want %d openings", sh.OpenedCount, opens)
	}
	var k struct{ UsageCount int }
	if err := g.AdminJSON("GET", "/webapi/keys/"+ck.ID, nil, &k); err != nil {
		t.Fatal(err)
	}
	if k.UsageCount != uses {
		t.Errorf("usageCount %d after the full disk and a restart, want %d authorized uses", k.UsageCount, uses)
	}
}

// faultSeed is a data directory a gateway has used: a webapi.db with a
// key, a template and a contract in it, and its master.key.
func faultSeed(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	g := start(t, gatewayproc.Options{Dir: dir})
	if err := g.AddTemplate("PAGE-1", "LEGAL", "Seed NDA", strings.Repeat("Keep each other's secrets. ", 400)); err != nil {
		t.Fatal(err)
	}
	k, err := g.CreateKey("contracts", "seed", "alice", []string{"create"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		crashMust(t, "POST", g.Site+"/webapi/contracts", k.Token, map[string]any{
			"templateId": "PAGE-1", "name": fmt.Sprintf("seed %d", i),
			"signers": []map[string]any{{"fullName": "Signer", "accessKind": "url"}},
		}, http.StatusCreated, nil)
	}
	if err := g.Stop(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// faultCopy copies the files a gateway needs from src into dst.
func faultCopy(t *testing.T, src, dst string) {
	t.Helper()
	for _, name := range []string{"webapi.db", "master.key"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBadFilesAtStart starts the real binary (`caddy run`) on a data
// directory with one thing wrong: it must exit non-zero, without a panic,
// and say which file is wrong.
func TestBadFilesAtStart(t *testing.T) {
	seed := faultSeed(t)
	cases := []struct {
		name string
		// prepare makes data (the data directory, inside dir) bad; it
		// returns the path the error must name.
		prepare func(t *testing.T, dir, data string) string
		// want are more words the error must hold.
		want []string
	}{
		{"garbage webapi.db", func(t *testing.T, dir, data string) string {
			b := []byte(strings.Repeat("this is not a bbolt file\n", 3000))
			os.WriteFile(filepath.Join(data, "webapi.db"), b, 0o600)
			return filepath.Join(data, "webapi.db")
		}, nil},
		{"truncated webapi.db", func(t *testing.T, dir, data string) string {
			faultCopy(t, seed, data)
			db := filepath.Join(data, "webapi.db")
			st, err := os.Stat(db)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(db, st.Size()/3); err != nil {
				t.Fatal(err)
			}
			return db
		}, nil},
		{"webapi.db cut inside its first page", func(t *testing.T, dir, data string) string {
			faultCopy(t, seed, data)
			db := filepath.Join(data, "webapi.db")
			if err := os.Truncate(db, 100); err != nil {
				t.Fatal(err)
			}
			return db
		}, nil},
		{"webapi.db of another program", func(t *testing.T, dir, data string) string {
			path := filepath.Join(data, "webapi.db")
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucket([]byte("widgets"))
				if err != nil {
					return err
				}
				return b.Put([]byte("w1"), []byte("a widget"))
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			return path
		}, []string{"not a keygate database", "widgets"}},
		{"master key of 16 bytes", func(t *testing.T, dir, data string) string {
			path := filepath.Join(data, "master.key")
			os.WriteFile(path, make([]byte, 16), 0o600)
			return path
		}, []string{"16 bytes"}},
		{"master key of mode 0644", func(t *testing.T, dir, data string) string {
			faultCopy(t, seed, data)
			path := filepath.Join(data, "master.key")
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			return path
		}, []string{"0644"}},
		{"master key is a directory", func(t *testing.T, dir, data string) string {
			path := filepath.Join(data, "master.key")
			os.Mkdir(path, 0o700)
			return path
		}, nil},
		{"empty data directory on a read-only file system", func(t *testing.T, dir, data string) string {
			faultMountTmpfs(t, data, 1<<20, "ro")
			return filepath.Join(data, "master.key")
		}, []string{"read-only file system"}},
		{"used data directory on a read-only file system", func(t *testing.T, dir, data string) string {
			faultMountTmpfs(t, data, 4<<20)
			faultCopy(t, seed, data)
			if b, err := exec.Command("mount", "-o", "remount,ro", data).CombinedOutput(); err != nil {
				t.Fatalf("remount read-only: %v %s", err, b)
			}
			return filepath.Join(data, "webapi.db")
		}, []string{"read-only file system"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			if err := os.MkdirAll(data, 0o700); err != nil {
				t.Fatal(err)
			}
			named := tc.prepare(t, dir, data)
			g, err := gatewayproc.Start(gatewayproc.Options{Bin: bin, Dir: dir, DataDir: data})
			if err == nil {
				g.Stop()
				t.Fatalf("the gateway started")
			}
			<-g.Exited()
			out := g.Tail(64 << 10)
			if lb, err := os.ReadFile(filepath.Join(dir, "caddy.log")); err == nil {
				out += string(lb)
			}
			if g.ExitErr() == nil {
				t.Errorf("exit status 0; want an error")
			}
			for _, bad := range []string{"panic:", "goroutine ", "SIGSEGV", "SIGBUS"} {
				if strings.Contains(out, bad) {
					t.Fatalf("the gateway crashed (%q):\n%s", bad, out)
				}
			}
			// Caddy logs why it did not start as its last error.
			msg := ""
			for _, line := range strings.Split(out, "\n") {
				var e struct{ Level, Msg string }
				if json.Unmarshal([]byte(line), &e) == nil && e.Level == "error" {
					msg = e.Msg
				} else if strings.HasPrefix(line, "Error:") {
					msg = line
				}
			}
			if msg == "" {
				t.Fatalf("no error in the output:\n%s", out)
			}
			for _, w := range append([]string{named}, tc.want...) {
				if !strings.Contains(msg, w) {
					t.Errorf("the error does not say %q:\n%s", w, msg)
				}
			}
			t.Logf("%v: ...%s", g.ExitErr(), msg[max(0, strings.Index(msg, "provision webapi:")):])
		})
	}
}

// TestSMTPOutage points the gateway at an SMTP server that is down for a
// while, refusing every message (451) or not listening at all, while
// clients create contracts that mail their signers and watchers. Each
// create is answered while the server is still down and before any mail
// is delivered: the API never waits on SMTP. Once the server is back,
// every mail arrives exactly once per recipient and kind, and the outbox
// ends empty.
func TestSMTPOutage(t *testing.T) {
	for _, mode := range []string{"refusing", "not listening"} {
		t.Run(mode, func(t *testing.T) { faultSMTPOutage(t, mode) })
	}
}

func faultSMTPOutage(t *testing.T, mode string) {
	var ms *mailtest.Server
	addr := ""
	switch mode {
	case "refusing":
		ms = mailtest.Start(t)
		ms.FailNext(1 << 30)
		addr = ms.Addr
	case "not listening":
		port, err := freeport.One()
		if err != nil {
			t.Fatal(err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(port)
	}
	dir := t.TempDir()
	g := start(t, gatewayproc.Options{Dir: dir,
		WebAPI: fmt.Sprintf("smtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}", addr)})
	if err := g.AddTemplate("PAGE-1", "LEGAL", "Outage NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	k, err := g.CreateKey("contracts", "outage", "alice", []string{"get", "create"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	delivered := func() []mailtest.Mail {
		if ms == nil {
			return nil
		}
		return ms.All()
	}
	// retries counts the failed attempts the gateway logged.
	retries := func() int {
		b, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
		return strings.Count(string(b), "notification not delivered, will retry")
	}

	const contracts = 10
	type pair struct{ rcpt, kind string }
	expected := map[pair]bool{}
	var slowest time.Duration
	for i := 0; i < contracts; i++ {
		a, b, w := fmt.Sprintf("a%d@example.com", i), fmt.Sprintf("b%d@example.com", i), fmt.Sprintf("w%d@example.com", i)
		began := time.Now()
		crashMust(t, "POST", g.Site+"/webapi/contracts", k.Token, map[string]any{
			"templateId": "PAGE-1", "name": fmt.Sprintf("outage %d", i),
			"signers": []map[string]any{
				{"fullName": "A " + strconv.Itoa(i), "accessKind": "email", "email": a},
				{"fullName": "B " + strconv.Itoa(i), "accessKind": "email", "email": b}},
			"watchers": []map[string]any{{"name": "W " + strconv.Itoa(i), "email": w, "notificationKinds": "created"}},
		}, http.StatusCreated, nil)
		slowest = max(slowest, time.Since(began))
		expected[pair{a, "invitation"}] = true
		expected[pair{b, "invitation"}] = true
		expected[pair{w, "created"}] = true
	}
	// Every create was answered while the server was down: nothing could
	// have been delivered, and the worker has been trying meanwhile.
	if n := len(delivered()); n != 0 {
		t.Fatalf("%d mails delivered while the server was down", n)
	}
	testwait.For(t, 10*time.Second, "the gateway tried and failed to deliver", func() bool { return retries() > 0 })
	time.Sleep(2 * time.Second) // down for a while
	if n := len(delivered()); n != 0 {
		t.Fatalf("%d mails delivered while the server was down", n)
	}
	failedBefore := retries()

	// The server comes back.
	back := time.Now()
	switch mode {
	case "refusing":
		ms.FailNext(0)
	case "not listening":
		ms = mailtest.StartOn(t, addr)
	}
	count := func() map[pair]int {
		got := map[pair]int{}
		for _, m := range delivered() {
			got[pair{m.To, crashMailKind(m.Subject)}]++
		}
		return got
	}
	testwait.For(t, 40*time.Second, "every mail delivered once the server is back", func() bool {
		got := count()
		for p := range expected {
			if got[p] == 0 {
				return false
			}
		}
		return true
	})
	took := time.Since(back)
	// A clean stop finishes what is in flight; then nothing is queued
	// and nothing came twice.
	stopWithEmptyOutbox(t, g, "delivery")
	got := count()
	for p, n := range got {
		if !expected[p] {
			t.Errorf("unexpected mail to %s: %s", p.rcpt, p.kind)
		}
		if n != 1 {
			t.Errorf("%s/%s delivered %d times", p.rcpt, p.kind, n)
		}
	}
	t.Logf("%d contracts created while the server was down (slowest reply %s); %d failed attempts logged during the outage; all %d mails delivered once within %s of its return",
		contracts, slowest.Round(time.Millisecond), failedBefore, len(expected), took.Round(100*time.Millisecond))
}

// TestReloadOntoBadFiles reloads a running gateway (`caddy reload`) onto a
// data directory whose webapi.db is damaged: the reload fails with an
// error that names the file, without a panic, and the gateway goes on
// serving from its database.
func TestReloadOntoBadFiles(t *testing.T) {
	g := start(t, gatewayproc.Options{})
	k, err := g.CreateKey("contracts", "reload", "alice", []string{"search"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := t.TempDir()
	badDB := filepath.Join(bad, "webapi.db")
	if err := os.WriteFile(badDB, []byte(strings.Repeat("not a database\n", 4000)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(g.Config)
	if err != nil {
		t.Fatal(err)
	}
	next := strings.Replace(string(cfg), "data_dir "+g.Dir(), "data_dir "+bad, 1)
	if next == string(cfg) {
		t.Fatal("no data_dir line in the config")
	}
	nextPath := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(nextPath, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "reload", "--config", nextPath, "--adapter", "caddyfile", "--address", strings.TrimPrefix(g.Admin, "http://"))
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the reload onto a damaged database succeeded:\n%s", out)
	}
	for _, crash := range []string{"panic:", "goroutine "} {
		if strings.Contains(string(out), crash) {
			t.Fatalf("caddy reload crashed:\n%s", out)
		}
	}
	if !strings.Contains(string(out), badDB) {
		t.Errorf("the reload's error does not name %s:\n%s", badDB, out)
	}
	select {
	case <-g.Exited():
		t.Fatalf("the gateway exited after a failed reload:\n%s", g.Tail(4096))
	default:
	}
	crashMust(t, "GET", g.Site+"/webapi/contracts?page-size=1", k.Token, nil, http.StatusOK, nil)
	if _, err := g.CreateKey("contracts", "after reload", "alice", []string{"search"}, nil); err != nil {
		t.Errorf("creating a key after the failed reload: %v", err)
	}
	t.Logf("%v: ...%s", err, string(out)[max(0, strings.Index(string(out), "provision webapi:")):])
}

// TestDatabaseConnectionCut runs the gateway on PostgreSQL through a
// proxy that cuts its connections mid-statement while a small, bounded
// load is in flight (contract and share GETs and POSTs, and a quota
// key whose key check asks the database at nearly every request): each
// reply is the request's success or a 503 `unavailable` problem with
// Retry-After, never a 500; once the cuts stop, every request succeeds.
func TestDatabaseConnectionCut(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.Schema(t)
	dsn, err := url.Parse(srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startHangingProxy(t, dsn.Host)
	dsn.Host = proxy.addr()
	g := start(t, gatewayproc.Options{
		WebAPI: fmt.Sprintf("storage postgres {\n\t\t\tdsn %q\n\t\t\tschema %s\n\t\t}", dsn.String(), schema),
	})
	t.Cleanup(func() {
		if b, err := os.ReadFile(filepath.Join(g.Dir(), "caddy.log")); t.Failed() && err == nil {
			t.Logf("the end of caddy.log:\n%s", b[max(0, len(b)-16<<10):])
		}
	})
	api := prepareAPIs(t, g, "Cut")
	// A quota of 199 is leased in blocks of one, so the key check asks
	// the database at nearly every request.
	quota, err := g.CreateKey("contracts", "Cut quota", "alice", []string{"get"},
		map[string]any{"quota": map[string]any{"limit": 199, "period": "month"}})
	if err != nil {
		t.Fatal(err)
	}
	var contract struct{ ID string }
	crashMust(t, "POST", g.Site+"/webapi/contracts", api.contracts.Token, map[string]any{
		"templateId": "PAGE-1", "name": "cut",
		"signers": []map[string]any{{"fullName": "Cut Signer", "accessKind": "url"}},
	}, http.StatusCreated, &contract)
	var share struct{ UUID string }
	crashMust(t, "POST", g.Site+"/webapi/share", api.share.Token,
		map[string]any{"type": "ISSUE", "issueId": "CUT-0", "projectId": "P1"}, http.StatusCreated, &share)

	requests := []struct {
		name, method, path, token string
		body                      func(n int) any
		want                      int // the status of a request no cut met
	}{
		{"contract GET", "GET", "/webapi/contracts/" + contract.ID, api.contracts.Token, nil, http.StatusOK},
		{"contract POST", "POST", "/webapi/contracts", api.contracts.Token, func(n int) any {
			return map[string]any{"templateId": "PAGE-1", "name": fmt.Sprintf("cut %d", n),
				"signers": []map[string]any{{"fullName": "Cut Signer", "accessKind": "url"}}}
		}, http.StatusCreated},
		{"share GET", "GET", "/webapi/share/" + share.UUID, api.share.Token, nil, http.StatusOK},
		{"share POST", "POST", "/webapi/share", api.share.Token, func(n int) any {
			return map[string]any{"type": "ISSUE", "issueId": fmt.Sprintf("CUT-%d", n), "projectId": "P1"}
		}, http.StatusCreated},
		{"key check (quota)", "GET", "/webapi/contracts/" + contract.ID, quota.Token, nil, http.StatusOK},
	}
	send := func(i, n int) (crashReply, error) {
		rq := requests[i]
		var body any
		if rq.body != nil {
			body = rq.body(n)
		}
		return crashDo(rq.method, g.Site+rq.path, rq.token, body)
	}

	// 4 clients, 12 rounds of every request each, within 30 s; the
	// connections are cut every 20 ms meanwhile.
	const clients, rounds = 4, 12
	deadline := time.Now().Add(30 * time.Second)
	stop := make(chan struct{})
	cutting := make(chan struct{})
	go func() {
		defer close(cutting)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				proxy.cut()
			}
		}
	}()
	var mu sync.Mutex
	seen := make([]map[int]int, len(requests))
	for i := range seen {
		seen[i] = map[int]int{}
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds && time.Now().Before(deadline); r++ {
				for i, rq := range requests {
					reply, err := send(i, (c*rounds+r)*len(requests)+i+1)
					mu.Lock()
					switch {
					case err != nil:
						t.Errorf("%s: %v", rq.name, err)
					case reply.status != rq.want:
						faultProblem(t, rq.name+" with its connection cut", reply, http.StatusServiceUnavailable, "unavailable", "postgres", "EOF")
						fallthrough
					default:
						seen[i][reply.status]++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-cutting
	failed := 0
	for i, rq := range requests {
		t.Logf("%s: %v", rq.name, seen[i])
		failed += seen[i][http.StatusServiceUnavailable]
	}
	if failed == 0 {
		t.Error("no request met a cut connection")
	}

	// The cuts over, the pool's new connections serve every request.
	for i, rq := range requests {
		testwait.For(t, testwait.Generous, rq.name+" to succeed again", func() bool {
			reply, err := send(i, 10000+i)
			return err == nil && reply.status == rq.want
		})
	}
}
