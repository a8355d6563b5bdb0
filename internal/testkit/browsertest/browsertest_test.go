package browsertest

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/chromedp/chromedp"
)

// strictCSP is the policy of the Web API Keys page: no inline script, no
// string reaching an HTML or script sink.
const strictCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// pages serves each path's HTML under strictCSP, and /style.css.
func pages(t *testing.T, html map[string]string, css string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for path, body := range html {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Security-Policy", strictCSP)
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, body)
		})
	}
	mux.HandleFunc("/style.css", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/css")
		fmt.Fprint(w, css)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// recorder is a testing.TB that keeps what Axe reports instead of
// failing the test that checks Axe.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errors []string
	logs   []string
	fatal  string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func (r *recorder) Logf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.logs = append(r.logs, fmt.Sprintf(format, args...))
}

// Fatalf stops the calling goroutine as testing's does: run the code
// under test on a goroutine of its own (see record).
func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) { r.Fatalf("%s", fmt.Sprint(args...)) }

// record runs f with a recorder and returns the recorder when f is done.
func record(t *testing.T, f func(tb testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

const (
	head = `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>Test page</title>`
	foot = `</main></body></html>`
)

// TestAxeInBrowser checks pages under the strict policy: Axe reports the
// serious and critical violations by rule, passes a clean page, and only
// logs the moderate ones.
func TestAxeInBrowser(t *testing.T) {
	cases := []struct {
		name, body string
		rules      []string // the serious or critical rules reported
		moderate   []string // logged, not reported
	}{
		{name: "clean", body: `<main><h1>Keys</h1><form><label for="n">Name</label> <input id="n" name="n"> <button type="submit">Create</button></form>`},
		{name: "unlabelled input", body: `<main><h1>Keys</h1><form><input id="n" name="n"> <button type="submit">Create</button></form>`, rules: []string{"label"}},
		{name: "image without alt", body: `<main><h1>Keys</h1><img src="/logo.png">`, rules: []string{"image-alt"}},
		{name: "low contrast", body: `<main><h1>Keys</h1><p class="faint">faint text</p>`, rules: []string{"color-contrast"}},
		{name: "button without name", body: `<main><h1>Keys</h1><button type="button"></button>`, rules: []string{"button-name"}},
		{name: "moderate only", body: `<div><p>Text outside any landmark, no heading.</p></div><main>`, moderate: []string{"page-has-heading-one", "region"}},
	}
	html := map[string]string{}
	for i, c := range cases {
		html[fmt.Sprintf("/%d", i)] = head + `<link rel="stylesheet" href="/style.css"></head><body>` + c.body + foot
	}
	// Inline style is not allowed by the policy.
	srv := pages(t, html, ".faint { color: #bbb; background: #fff; }")
	ctx := New(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s/%d", srv.URL, i))); err != nil {
				t.Fatal(err)
			}
			r := record(t, func(tb testing.TB) { Axe(tb, ctx, c.name) })
			if r.fatal != "" {
				t.Fatalf("Axe failed: %s", r.fatal)
			}
			if len(r.errors) != len(c.rules) {
				t.Errorf("%d reports, want %d (%v):\n%s", len(r.errors), len(c.rules), c.rules, strings.Join(r.errors, "\n"))
			}
			for _, rule := range c.rules {
				if !slices.ContainsFunc(r.errors, func(e string) bool { return strings.Contains(e, " violation "+rule+": ") }) {
					t.Errorf("no report names %s:\n%s", rule, strings.Join(r.errors, "\n"))
				}
			}
			for _, e := range r.errors {
				if !strings.Contains(e, "dequeuniversity.com/rules/axe/") {
					t.Errorf("the report has no help URL: %s", e)
				}
			}
			if len(r.logs) != 1 {
				t.Fatalf("logs %q", r.logs)
			}
			for _, rule := range c.moderate {
				if !strings.Contains(r.logs[0], rule) {
					t.Errorf("the log does not list %s: %s", rule, r.logs[0])
				}
			}
			t.Log(strings.Join(append(r.errors, r.logs...), "\n"))
		})
	}

	t.Run("reports the element", func(t *testing.T) {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/1")); err != nil {
			t.Fatal(err)
		}
		r := record(t, func(tb testing.TB) { Axe(tb, ctx, "the form") })
		if len(r.errors) != 1 || !strings.Contains(r.errors[0], "axe-core on the form: critical violation label:") ||
			!strings.Contains(r.errors[0], `#n: <input id="n" name="n">`) {
			t.Errorf("report %q", r.errors)
		}
	})

	// The page's policy holds for the page while Axe runs through the
	// DevTools protocol: a string still cannot reach an HTML sink.
	t.Run("policy in force", func(t *testing.T) {
		blocked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { try { document.body.innerHTML = "<p>x</p>"; return false } catch (e) { return e instanceof TypeError } })()`))
		if err != nil || !blocked {
			t.Errorf("innerHTML with a string was not blocked (%v): the page's Trusted Types policy is not in force", err)
		}
	})

	// An install that is not the lock file's fails the test and says
	// what to run.
	lock, err := os.ReadFile(filepath.Join(axeDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	installs := []struct {
		name      string
		installed map[string]string // file under node_modules/axe-core: content
		want      string
	}{
		{name: "axe-core missing", want: "axe-core is not installed"},
		{name: "axe-core stale", installed: map[string]string{"package.json": `{"version": "4.0.0"}`, "axe.min.js": "var axe = {};"}, want: "axe-core 4.0.0 is installed, the lock file wants 4."},
	}
	for _, c := range installs {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			must(t, os.MkdirAll(filepath.Join(dir, "node_modules", "axe-core"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "package-lock.json"), lock, 0o644))
			for name, content := range c.installed {
				must(t, os.WriteFile(filepath.Join(dir, "node_modules", "axe-core", name), []byte(content), 0o644))
			}
			was := axeDir
			axeDir = dir
			defer func() { axeDir = was }()
			r := record(t, func(tb testing.TB) { Axe(tb, ctx, "any page") })
			if !strings.Contains(r.fatal, c.want) || !strings.Contains(r.fatal, "make test-deps") {
				t.Errorf("Axe fails with %q, want %q and make test-deps", r.fatal, c.want)
			}
		})
	}
}

// TestBasicAuthInBrowser logs in to a page and to the API its script
// fetches, each with a challenge of its own (two realms, so the browser
// cannot reuse the page's credentials unasked); wrong credentials give
// the page the 401.
func TestBasicAuthInBrowser(t *testing.T) {
	var challenged atomic.Int32
	guard := func(realm string, h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			user, password, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(user+":"+password), []byte("admin:s3cret")) != 1 {
				if realm == "api" {
					challenged.Add(1)
				}
				w.Header().Set("WWW-Authenticate", `Basic realm="`+realm+`"`)
				http.Error(w, "who are you?", http.StatusUnauthorized)
				return
			}
			h(w, r)
		}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/page/", guard("page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", strictCSP)
		fmt.Fprint(w, head+`<script src="/page/app.js"></script></head><body><main><h1>Keys</h1><p id="out">…</p>`+foot)
	}))
	mux.HandleFunc("/page/app.js", guard("page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `fetch("/api/whoami").then(r => r.text()).then(s => { document.getElementById("out").textContent = s; });`)
	}))
	mux.HandleFunc("/api/whoami", guard("api", func(w http.ResponseWriter, r *http.Request) {
		user, _, _ := r.BasicAuth()
		fmt.Fprint(w, "you are "+user)
	}))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	cases := []struct {
		name, password string
		status         int64
		out            string
	}{
		{name: "right password", password: "s3cret", status: http.StatusOK, out: "you are admin"},
		{name: "wrong password", password: "guess", status: http.StatusUnauthorized},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			challenged.Store(0)
			ctx := New(t)
			if err := BasicAuth(ctx, "admin", c.password); err != nil {
				t.Fatal(err)
			}
			resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(srv.URL+"/page/"))
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != c.status {
				t.Fatalf("status %d, want %d", resp.Status, c.status)
			}
			if c.out == "" {
				return
			}
			if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#out`))); err != nil {
				t.Fatal(err)
			}
			out, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => { const s = document.getElementById("out").textContent; return s === "…" ? null : s; })()`))
			if err != nil {
				t.Fatal(err)
			}
			if out != c.out {
				t.Errorf("the page's fetch got %q, want %q", out, c.out)
			}
			if challenged.Load() == 0 {
				t.Error("the API never challenged the page's fetch: the test proves nothing of it")
			}
		})
	}
}

// TestDownloadsInBrowser saves downloads under the names they suggest:
// a link the server answers with an attachment, and a file the page's
// own script makes from a Blob (as a page does with a token it must
// not put in a URL), on a page behind basic authentication.
func TestDownloadsInBrowser(t *testing.T) {
	const csv, token = "name,owner\nbrowser,alice\n", "kg_0123456789abcdef\n"
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if _, _, ok := r.BasicAuth(); !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="keys"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Security-Policy", strictCSP)
		fmt.Fprint(w, head+`<script src="/app.js"></script></head><body><main><h1>Keys</h1><a id="export" href="/export">Export</a> <button type="button" id="token">Download</button>`+foot)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprintf(w, `document.addEventListener("DOMContentLoaded", () => document.getElementById("token").addEventListener("click", () => {
	const a = document.createElement("a");
	a.href = URL.createObjectURL(new Blob([%q], {type: "text/plain"}));
	a.download = "browser key.txt";
	a.click();
	URL.revokeObjectURL(a.href);
}));`, token)
	})
	mux.HandleFunc("/export", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/csv")
		w.Header().Set("Content-Disposition", `attachment; filename="keys.csv"`)
		fmt.Fprint(w, csv)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx := New(t)
	dir := t.TempDir()
	must(t, BasicAuth(ctx, "admin", "s3cret"))
	must(t, DownloadsTo(ctx, dir))
	must(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL), chromedp.Click(chromedp.ID("export"))))
	if got := string(WaitDownload(t, dir, "keys.csv")); got != csv {
		t.Errorf("downloaded %q, want %q", got, csv)
	}
	must(t, chromedp.Do(ctx, chromedp.Click(chromedp.ID("token"))))
	if got := string(WaitDownload(t, dir, "browser key.txt")); got != token {
		t.Errorf("downloaded %q, want %q", got, token)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%d files in the download directory", len(entries))
	}
}

// TestClipboardInBrowser reads what the page's "Copy" put on the
// clipboard.
func TestClipboardInBrowser(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", strictCSP)
		fmt.Fprint(w, head+`<script src="/app.js"></script></head><body><main><h1>Keys</h1><button type="button" id="copy">Copy</button> <span id="done" role="status"></span>`+foot)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, `document.addEventListener("DOMContentLoaded", () => document.getElementById("copy").addEventListener("click", () =>
	navigator.clipboard.writeText("kg_0123456789abcdef").then(() => { document.getElementById("done").textContent = "Copied"; },
		e => { document.getElementById("done").textContent = "Failed: " + e; })));`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	ctx := New(t)
	must(t, AllowClipboard(ctx))
	must(t, chromedp.Do(ctx, chromedp.Navigate(srv.URL), chromedp.Click(chromedp.ID("copy"))))
	done, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById("done").textContent || null`))
	must(t, err)
	if done != "Copied" {
		t.Fatalf("the page says %q", done)
	}
	got, err := ClipboardText(ctx)
	must(t, err)
	if got != "kg_0123456789abcdef" {
		t.Errorf("clipboard %q", got)
	}
}

// TestViewportInBrowser: the page sees the size and colour scheme asked.
func TestViewportInBrowser(t *testing.T) {
	srv := pages(t, map[string]string{
		"/":       head + `</head><body><main><h1>Keys</h1>` + foot,
		"/legacy": `<!doctype html><html lang="en"><head><title>No viewport</title></head><body><main><h1>Keys</h1>` + foot,
	}, "")
	cases := []struct {
		name  string
		opts  []Option
		path  string
		width int
		dark  bool
	}{
		{name: "default", path: "/", width: 1200},
		{name: "phone", opts: []Option{WindowSize(390, 844), Mobile()}, path: "/", width: 390},
		// A phone lays out a page without a meta viewport 980 px wide.
		{name: "phone, no meta viewport", opts: []Option{WindowSize(390, 844), Mobile()}, path: "/legacy", width: 980},
		{name: "narrow window", opts: []Option{WindowSize(390, 844)}, path: "/legacy", width: 390},
		{name: "dark", opts: []Option{DarkScheme()}, path: "/", width: 1200, dark: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := New(t, c.opts...)
			if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+c.path)); err != nil {
				t.Fatal(err)
			}
			got, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
				Width int
				Dark  bool
			}](`({width: window.innerWidth, dark: matchMedia("(prefers-color-scheme: dark)").matches})`))
			if err != nil {
				t.Fatal(err)
			}
			if got.Width != c.width || got.Dark != c.dark {
				t.Errorf("the page sees width %d, dark %v; want %d, %v", got.Width, got.Dark, c.width, c.dark)
			}
		})
	}
}
