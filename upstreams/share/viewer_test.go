package share

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/clientip"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// page sends a public page request from ip, with optional cookies.
func (e *env) page(method, path, accept, contentType, body, ip string, cookies ...*http.Cookie) *httptest.ResponseRecorder {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.RemoteAddr = "192.0.2.1:5555"
	if ip != "" {
		req = req.WithContext(clientip.With(req.Context(), netip.MustParseAddr(ip)))
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	return serve(e.viewer, req)
}

const (
	htmlAccept = "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"
	jsonAccept = "application/json"
	formType   = "application/x-www-form-urlencoded"
)

func unlockCookieOf(t *testing.T, w *httptest.ResponseRecorder) *http.Cookie {
	t.Helper()
	for _, c := range w.Result().Cookies() {
		if c.Name == unlockCookieName {
			return c
		}
	}
	t.Fatalf("no unlock cookie in %v", w.Header())
	return nil
}

func TestViewerOpenShare(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := &CreateRequest{Type: TypeBoard, ProjectID: str("P1"), Board: &Board{ID: "7"},
			FieldsConfig: &FieldsConfig{FieldConfigs: map[string]FieldConfig{
				"summary":  {FieldPermissions: []string{PermView, PermEdit}},
				"<script>": {FieldPermissions: []string{PermAdd}}}},
			SelectedUsersConfig: &SelectedUsersConfig{Allowed: false, List: []SelectedUser{{Email: "x@example.com"}}}}
		sh := e.create(alice, in)
		path := "/s/" + sh.UUID

		w := e.page("GET", path, htmlAccept, "", "", "203.0.113.9")
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("HTML page: %d %s", w.Code, w.Header())
		}
		body := w.Body.String()
		for _, want := range []string{"BOARD", "P1", "<td>summary</td>", "&lt;script&gt;", `class="p on">yes`} {
			if !strings.Contains(body, want) {
				t.Errorf("page lacks %q", want)
			}
		}
		if strings.Contains(body, "<script>") || strings.Contains(body, "x@example.com") || strings.Contains(body, "alice") {
			t.Fatal("page shows what it must not")
		}
		for h, want := range map[string]string{"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "X-Content-Type-Options": "nosniff"} {
			if w.Header().Get(h) != want {
				t.Errorf("%s: %q", h, w.Header().Get(h))
			}
		}

		w = e.page("GET", path, jsonAccept, "", "", "203.0.113.9")
		if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("JSON page: %d %s", w.Code, w.Body)
		}
		if got := w.Body.String(); got != `{"uuid":"`+sh.UUID+`","type":"BOARD","issueId":null,"projectId":"P1","board":{"id":"7"},"jql":null,"expiration":null,"fieldsConfig":{"fieldConfigs":{"\u003cscript\u003e":{"fieldPermissions":["ADD"]},"summary":{"fieldPermissions":["VIEW","EDIT"]}}},"trackerConnected":false}`+"\n" {
			t.Fatalf("JSON view %s", got)
		}
		if w := e.page("HEAD", path, htmlAccept, "", "", "203.0.113.9"); w.Code != 200 {
			t.Fatalf("HEAD %d", w.Code)
		}

		// Two GETs counted, in memory first: the stored record is unchanged
		// until Flush, but reads add what is pending.
		if got, _ := e.store.Get(context.Background(), alice, sh.UUID); got.OpenedCount != 2 {
			t.Fatalf("openedCount %d before flush, want 2", got.OpenedCount)
		}
		if r := e.stored(sh.UUID); r.OpenedCount != 0 {
			t.Fatalf("stored openedCount %d before flush: a view wrote to bbolt", r.OpenedCount)
		}
		acts, _ := e.store.Activity(context.Background(), alice, sh.UUID, 0, 0)
		if len(acts) != 3 || acts[0].Action != ActionViewed || *acts[0].IP != "203.0.113.9" || acts[0].Email != nil || acts[0].User != nil {
			t.Fatalf("activity before flush %s", mustJSON(t, acts))
		}
		if err := e.store.Flush(); err != nil {
			t.Fatal(err)
		}
		if r := e.stored(sh.UUID); r.OpenedCount != 2 {
			t.Fatalf("stored openedCount %d after flush", r.OpenedCount)
		}
		if got, _ := e.store.Get(context.Background(), alice, sh.UUID); got.OpenedCount != 2 {
			t.Fatalf("openedCount %d after flush (counted twice?)", got.OpenedCount)
		}
		after, _ := e.store.Activity(context.Background(), alice, sh.UUID, 0, 0)
		if mustJSON(t, after) != mustJSON(t, acts) {
			t.Fatalf("activity changed by flush:\n%s\n%s", mustJSON(t, after), mustJSON(t, acts))
		}
		e.checkIndexes()
	})
}

func TestViewerMissingAndExpired(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sh := e.create(alice, &CreateRequest{Type: TypeIssue, IssueID: str("1"), Expiration: i64(e.nowMs() + 1000)})
		gone := "/s/" + sh.UUID
		e.clock.Advance(time.Second)
		tests := []struct {
			name, method, path, accept string
			status                     int
			code                       string
		}{
			{"unknown uuid JSON", "GET", "/s/00000000-0000-4000-8000-000000000000", jsonAccept, 404, "not_found"},
			{"not a uuid", "GET", "/s/abc", jsonAccept, 404, "not_found"},
			{"other path", "GET", "/s/", jsonAccept, 404, "not_found"},
			{"expired JSON", "GET", gone, jsonAccept, 410, "gone"},
			{"expired unlock", "POST", gone + "/unlock", jsonAccept, 410, "gone"},
			{"wrong method", "DELETE", gone, jsonAccept, 405, "method_not_allowed"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				wantProblem(t, e.page(tc.method, tc.path, tc.accept, formType, "password=x", "203.0.113.1"), tc.status, tc.code)
			})
		}
		w := e.page("GET", gone, htmlAccept, "", "", "")
		if w.Code != 410 || !strings.Contains(w.Body.String(), "expired") {
			t.Fatalf("expired page %d %s", w.Code, w.Body)
		}
		w = e.page("GET", "/s/00000000-0000-4000-8000-000000000000", "", "", "", "")
		if w.Code != 404 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") {
			t.Fatalf("missing page %d %s", w.Code, w.Header())
		}
		if acts, _ := e.store.Activity(context.Background(), alice, sh.UUID, 0, 0); len(acts) != 1 {
			t.Fatalf("an expired share was viewed: %s", mustJSON(t, acts))
		}
	})
}

func TestViewerPasswordUnlock(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := issueShare("I1", "P1")
		in.Password = Password("open sesame")
		sh := e.create(alice, in)
		path := "/s/" + sh.UUID
		ip := "203.0.113.5"

		w := e.page("GET", path, htmlAccept, "", "", ip)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `type="password"`) || strings.Contains(w.Body.String(), `name="email"`) ||
			!strings.Contains(w.Body.String(), `action="/s/`+sh.UUID+`/unlock"`) {
			t.Fatalf("locked page %d %s", w.Code, w.Body)
		}
		wantProblem(t, e.page("GET", path, jsonAccept, "", "", ip), 401, "forbidden", "password:required")

		w = e.page("POST", path+"/unlock", htmlAccept, formType, "password=wrong", ip)
		if w.Code != 401 || !strings.Contains(w.Body.String(), "The password is wrong.") {
			t.Fatalf("wrong password: %d %s", w.Code, w.Body)
		}
		if len(w.Result().Cookies()) != 0 {
			t.Fatal("cookie set for a wrong password")
		}
		wantProblem(t, e.page("POST", path+"/unlock", "", "application/json", `{"password":"nope","email":"who@example.com"}`, ip), 401, "forbidden")
		wantProblem(t, e.page("POST", path+"/unlock", "", "application/json", `{}`, ip), 400, "invalid_request", "password:required")
		wantProblem(t, e.page("POST", path+"/unlock", jsonAccept, "text/plain", `password=x`, ip), 415, "unsupported_media_type")

		acts, _ := e.store.Activity(context.Background(), alice, sh.UUID, 0, 0)
		if len(acts) != 3 || acts[0].Action != ActionUnlockFailed || *acts[0].IP != ip || *acts[0].Email != "who@example.com" ||
			acts[1].Action != ActionUnlockFailed || acts[1].Email != nil {
			t.Fatalf("activity %s", mustJSON(t, acts))
		}

		// From another site, even with the right password (login CSRF):
		// refused, no cookie, nothing recorded.
		for _, h := range [][2]string{{"Origin", "https://evil.example"}, {"Sec-Fetch-Site", "cross-site"}, {"Origin", "null"}} {
			req := httptest.NewRequest("POST", path+"/unlock", strings.NewReader("password=open+sesame"))
			req.Header.Set("Content-Type", formType)
			req.Header.Set(h[0], h[1])
			req = req.WithContext(clientip.With(req.Context(), netip.MustParseAddr(ip)))
			if w := serve(e.viewer, req); w.Code != http.StatusForbidden || len(w.Result().Cookies()) != 0 {
				t.Errorf("unlock with %s: %s: %d %v", h[0], h[1], w.Code, w.Result().Cookies())
			}
		}
		if acts, _ := e.store.Activity(context.Background(), alice, sh.UUID, 0, 0); len(acts) != 3 {
			t.Errorf("cross-site unlocks recorded: %s", mustJSON(t, acts))
		}

		w = e.page("POST", path+"/unlock", htmlAccept, formType, url.Values{"password": {"open sesame"}}.Encode(), ip)
		if w.Code != http.StatusSeeOther || w.Header().Get("Location") != path {
			t.Fatalf("unlock: %d %s", w.Code, w.Header())
		}
		c := unlockCookieOf(t, w)
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != path || c.MaxAge != 12*3600 || c.Secure {
			t.Fatalf("cookie attributes %+v", c)
		}
		w = e.page("GET", path, jsonAccept, "", "", ip, c)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `"issueId":"I1"`) {
			t.Fatalf("with cookie: %d %s", w.Code, w.Body)
		}
		acts, _ = e.store.Activity(context.Background(), alice, sh.UUID, 1, 0)
		if acts[0].Action != ActionViewed || *acts[0].IP != ip || acts[0].Email != nil {
			t.Fatalf("viewed entry %s", mustJSON(t, acts))
		}

		// JSON unlock answers 204 with the cookie.
		w = e.page("POST", path+"/unlock", "", "application/json", `{"password":"open sesame"}`, ip)
		if w.Code != 204 {
			t.Fatalf("JSON unlock: %d %s", w.Code, w.Body)
		}
		unlockCookieOf(t, w)

		// Refused cookies: tampered, of another share, expired, after a
		// password change.
		other := e.create(alice, func() *CreateRequest { r := issueShare("I2", ""); r.Password = Password("x"); return r }())
		otherCookie := unlockCookieOf(t, e.page("POST", "/s/"+other.UUID+"/unlock", "", formType, "password=x", ip))
		tampered := *c
		tampered.Value = strings.Replace(c.Value, ".", "9.", 1)
		for name, ck := range map[string]*http.Cookie{"tampered": &tampered, "other share": otherCookie} {
			if w := e.page("GET", path, jsonAccept, "", "", ip, ck); w.Code != 401 {
				t.Fatalf("%s cookie: %d", name, w.Code)
			}
		}
		e.clock.Advance(12*time.Hour - time.Second)
		if w := e.page("GET", path, jsonAccept, "", "", ip, c); w.Code != 200 {
			t.Fatalf("cookie before 12 h: %d", w.Code)
		}
		e.clock.Advance(time.Second)
		if w := e.page("GET", path, jsonAccept, "", "", ip, c); w.Code != 401 {
			t.Fatalf("cookie after 12 h: %d", w.Code)
		}
		c2 := unlockCookieOf(t, e.page("POST", path+"/unlock", "", formType, "password=open+sesame", ip))
		if _, err := e.store.Update(context.Background(), alice, sh.UUID, func() *CreateRequest {
			r := issueShare("I1", "P1")
			r.Password = Password("changed")
			return r
		}()); err != nil {
			t.Fatal(err)
		}
		if w := e.page("GET", path, jsonAccept, "", "", ip, c2); w.Code != 401 {
			t.Fatalf("cookie after password change: %d", w.Code)
		}
	})
}

func TestViewerSelectedUsers(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := issueShare("I1", "P1")
		in.SelectedUsersConfig = &SelectedUsersConfig{Allowed: true, List: []SelectedUser{{Email: "Ann@example.com"}}}
		sh := e.create(alice, in)
		path := "/s/" + sh.UUID
		ip := "2001:db8::1"

		w := e.page("GET", path, htmlAccept, "", "", ip)
		if w.Code != 200 || !strings.Contains(w.Body.String(), `name="email"`) || strings.Contains(w.Body.String(), `type="password"`) {
			t.Fatalf("locked page %d %s", w.Code, w.Body)
		}
		wantProblem(t, e.page("GET", path, jsonAccept, "", "", ip), 401, "forbidden", "email:required")
		wantProblem(t, e.page("POST", path+"/unlock", "", "application/json", `{"email":"bob@example.com"}`, ip), 401, "forbidden")
		w = e.page("POST", path+"/unlock", htmlAccept, formType, "email=ann%40example.com", ip)
		if w.Code != 303 {
			t.Fatalf("unlock: %d %s", w.Code, w.Body)
		}
		c := unlockCookieOf(t, w)
		if w := e.page("GET", path, htmlAccept, "", "", ip, c); w.Code != 200 || strings.Contains(w.Body.String(), "<form") {
			t.Fatalf("with cookie: %d", w.Code)
		}
		acts, _ := e.store.Activity(context.Background(), alice, sh.UUID, 0, 0)
		if acts[0].Action != ActionViewed || *acts[0].Email != "ann@example.com" || *acts[0].IP != ip ||
			acts[1].Action != ActionUnlockFailed || *acts[1].Email != "bob@example.com" {
			t.Fatalf("activity %s", mustJSON(t, acts))
		}
		// Taken off the list: the cookie no longer opens the share.
		in.SelectedUsersConfig.List = []SelectedUser{{Email: "zed@example.com"}}
		if _, err := e.store.Update(context.Background(), alice, sh.UUID, in); err != nil {
			t.Fatal(err)
		}
		if w := e.page("GET", path, jsonAccept, "", "", ip, c); w.Code != 401 {
			t.Fatalf("removed e-mail still opens: %d", w.Code)
		}
	})
}

func TestViewerPasswordAndEmail(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := issueShare("I1", "")
		in.Password = Password("pw")
		in.SelectedUsersConfig = &SelectedUsersConfig{Allowed: true, List: []SelectedUser{{Email: "ann@example.com"}}}
		sh := e.create(alice, in)
		path := "/s/" + sh.UUID
		wantProblem(t, e.page("GET", path, jsonAccept, "", "", "203.0.113.1"), 401, "forbidden", "email:required", "password:required")
		for _, body := range []string{"email=eve%40example.com&password=pw", "email=ann%40example.com&password=no"} {
			if w := e.page("POST", path+"/unlock", "", formType, body, "203.0.113.1"); w.Code != 401 {
				t.Fatalf("%s: %d", body, w.Code)
			}
		}
		if w := e.page("POST", path+"/unlock", "", formType, "email=ann%40example.com&password=pw", "203.0.113.1"); w.Code != 303 {
			t.Fatalf("right pair: %d", w.Code)
		}
	})
}

func TestViewerRateLimit(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		in := issueShare("I1", "")
		in.Password = Password("right")
		sh := e.create(alice, in)
		unlock := "/s/" + sh.UUID + "/unlock"
		try := func(pw, ip string) *httptest.ResponseRecorder {
			return e.page("POST", unlock, jsonAccept, formType, "password="+pw, ip)
		}
		// Right passwords spend nothing.
		for range unlockBurst + 2 {
			if w := try("right", "203.0.113.7"); w.Code != 204 {
				t.Fatalf("right password: %d", w.Code)
			}
		}
		for i := range unlockBurst {
			if w := try("wrong", "203.0.113.7"); w.Code != 401 {
				t.Fatalf("attempt %d: %d", i, w.Code)
			}
		}
		w := try("wrong", "203.0.113.7")
		wantProblem(t, w, 429, "rate_limited")
		if ra := w.Header().Get("Retry-After"); ra != "12" {
			t.Fatalf("Retry-After %q", ra)
		}
		wantProblem(t, try("right", "203.0.113.7"), 429, "rate_limited")
		// The page says so too, and keeps no-store on a 429.
		if w := e.page("POST", unlock, "", formType, "password=wrong", "203.0.113.7"); w.Code != 429 ||
			!strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "Too many wrong attempts") {
			t.Fatalf("the page: %d %v", w.Code, w.Header())
		} else {
			problemtest.SecureHeaders(t, w.Code, w.Header())
		}
		if w := try("wrong", "203.0.113.8"); w.Code != 401 {
			t.Fatalf("another client is limited too: %d", w.Code)
		}
		e.clock.Advance(unlockEvery)
		if w := try("right", "203.0.113.7"); w.Code != 204 {
			t.Fatalf("after waiting: %d", w.Code)
		}
		if w := try("wrong", "203.0.113.7"); w.Code != 401 {
			t.Fatalf("after waiting, wrong: %d", w.Code)
		}
		wantProblem(t, try("wrong", "203.0.113.7"), 429, "rate_limited")
		// One /64 is one client.
		for range unlockBurst {
			try("wrong", "2001:db8:1:2::1")
		}
		wantProblem(t, try("wrong", "2001:db8:1:2::ffff"), 429, "rate_limited")

		acts, _ := e.store.Activity(context.Background(), alice, sh.UUID, maxActivityLimit, 0)
		failed := 0
		for _, a := range acts {
			if a.Action == ActionUnlockFailed {
				failed++
			}
		}
		if failed != 2*unlockBurst+2 {
			t.Fatalf("%d unlock-failed entries, want %d (refused attempts write none)", failed, 2*unlockBurst+2)
		}
	})
}

func TestUnlockLimiterIsBounded(t *testing.T) {
	fill := func(l *unlockLimiter, n int, now time.Time) {
		for i := range n {
			l.reserve(1, netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), now)
		}
	}
	// Fresh limiters: a tenth makes room, the map never outgrows its bound.
	l := newUnlockLimiter()
	fill(l, maxUnlockLimiters+500, testStart)
	if n := len(l.m); n > maxUnlockLimiters {
		t.Fatalf("%d limiters held", n)
	}
	// Idle ones (refilled, as good as new) go first, all of them.
	l = newUnlockLimiter()
	fill(l, maxUnlockLimiters, testStart)
	l.reserve(2, netip.MustParseAddr("10.255.0.1"), testStart.Add(unlockBurst*unlockEvery))
	if n := len(l.m); n != 1 {
		t.Fatalf("%d limiters after idle ones were due, want 1", n)
	}
}

func TestFlushDropsDeletedAndKeepsOnError(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		a := e.create(alice, issueShare("I1", "P1"))
		b := e.create(alice, issueShare("I2", "P1"))
		ev := Activity{Timestamp: e.nowMs(), Source: "share", Action: ActionViewed}
		e.store.recordPageEvent(a.ID, ev, true)
		e.store.recordPageEvent(b.ID, ev, true)
		// A failed write keeps the events for the next flush.
		e.failWrites(true)
		if err := e.store.Flush(); err == nil {
			t.Fatal("flush with refused writes succeeded")
		}
		e.failWrites(false)
		if got, _ := e.store.Get(context.Background(), alice, a.UUID); got.OpenedCount != 1 {
			t.Fatalf("openedCount %d after failed flush", got.OpenedCount)
		}
		if err := e.store.Delete(context.Background(), alice, b.UUID); err != nil {
			t.Fatal(err)
		}
		if err := e.store.Flush(); err != nil {
			t.Fatal(err)
		}
		if r := e.stored(a.UUID); r.OpenedCount != 1 {
			t.Fatalf("stored openedCount %d", r.OpenedCount)
		}
		e.checkIndexes()
		if n := e.activityEntries(); n != 2 {
			t.Fatalf("%d activity entries, want created+viewed of a", n)
		}
	})
}

// failingWrites is a Backend whose flushes fail, as a database that
// refuses writes makes them.
type failingWrites struct{ Backend }

func (failingWrites) Mark(storage.Tx) (int64, error) { return 0, errors.New("test: writes refused") }

// failWrites makes the store's flushes fail (true) or work again (false).
func (e *env) failWrites(fail bool) {
	if f, ok := e.store.be.(failingWrites); ok {
		e.store.be = f.Backend
	}
	if fail {
		e.store.be = failingWrites{e.store.be}
	}
}

func TestPageEventsFlushThemselvesWhenMany(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sh := e.create(alice, issueShare("I1", "P1"))
		for range autoFlushAt {
			e.store.recordPageEvent(sh.ID, Activity{Timestamp: e.nowMs(), Source: "share", Action: ActionViewed}, true)
		}
		testwait.For(t, testwait.Generous, "the automatic flush of all the events", func() bool {
			return e.stored(sh.UUID).OpenedCount == autoFlushAt
		})
		if got, _ := e.store.Get(context.Background(), alice, sh.UUID); got.OpenedCount != autoFlushAt {
			t.Fatalf("openedCount %d after the automatic flush", got.OpenedCount)
		}
	})
}

// Two instances on one PostgreSQL database: the unlock limit holds across
// them and their openings add up exactly.
func TestTwoInstancesOnPostgres(t *testing.T) {
	db := storetest.OpenPostgres(t)
	a, b := newEnv(t, db), newEnv(t, db)
	in := issueShare("I1", "")
	in.Password = Password("right")
	sh := a.create(alice, in)
	unlock := "/s/" + sh.UUID + "/unlock"
	for i := range unlockBurst {
		e := []*env{a, b}[i%2]
		if w := e.page("POST", unlock, jsonAccept, formType, "password=wrong", "203.0.113.7"); w.Code != 401 {
			t.Fatalf("attempt %d: %d", i, w.Code)
		}
	}
	wantProblem(t, a.page("POST", unlock, jsonAccept, formType, "password=wrong", "203.0.113.7"), 429, "rate_limited")
	wantProblem(t, b.page("POST", unlock, jsonAccept, formType, "password=right", "203.0.113.7"), 429, "rate_limited")

	open := issueShare("I2", "")
	sh2 := a.create(alice, open)
	var wg sync.WaitGroup
	for _, e := range []*env{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				e.store.recordPageEvent(sh2.ID, Activity{Timestamp: e.nowMs(), Source: "share", Action: ActionViewed}, true)
			}
			if err := e.store.Flush(); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, _ := a.store.Get(context.Background(), alice, sh2.UUID); got.OpenedCount != 100 {
		t.Fatalf("openedCount %d after two instances flushed 50 each", got.OpenedCount)
	}
	if acts, _ := b.store.Activity(context.Background(), alice, sh2.UUID, 1000, 0); len(acts) != 101 {
		t.Fatalf("%d activity entries, want created + 100 viewed", len(acts))
	}
}
