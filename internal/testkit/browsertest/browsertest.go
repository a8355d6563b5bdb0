// Package browsertest drives Debian's headless Chromium for the tests of
// the pages keygate serves: one place for the browser's flags, HTTP basic
// authentication answered as a user answers the login dialog, downloads
// into a directory, and an axe-core accessibility check. It is test
// support, for _test.go files.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

// Chromium finds Debian's chromium; without it the test fails, since a
// page must be proven in a real browser.
func Chromium(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: the browser tests need Debian's chromium package; run `make test-deps` (scripts/test-deps.sh) as root")
	}
	return path
}

// Option changes the browser that New starts.
type Option func(*config)

type config struct {
	width, height int
	mobile        bool
	dark          bool
	timeout       time.Duration
}

// WindowSize sets the viewport to width x height CSS pixels (default
// 1200 x 1000).
func WindowSize(width, height int) Option {
	return func(c *config) { c.width, c.height = width, height }
}

// Mobile makes the viewport a phone's: mobile layout (the page's meta
// viewport applies, as on a phone) and touch events. With WindowSize(390,
// 844) it is a common phone's screen.
func Mobile() Option {
	return func(c *config) { c.mobile = true }
}

// DarkScheme makes the page see prefers-color-scheme: dark.
func DarkScheme() Option {
	return func(c *config) { c.dark = true }
}

// Timeout bounds the whole browser session (default 5 minutes): when it
// passes, every action on the context fails instead of hanging the test.
// The default is generous: the keys page's longest session takes 12 s on
// an idle 2-core machine, and took over 2 minutes beside a load of 8.
func Timeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// New starts headless Chromium with one tab and returns its chromedp
// context; t's cleanup stops the browser.
func New(t testing.TB, opts ...Option) context.Context {
	t.Helper()
	c := config{width: 1200, height: 1000, timeout: 5 * time.Minute}
	for _, o := range opts {
		o(&c)
	}
	path := Chromium(t)

	// Chromium puts its singleton socket under TMPDIR, not the profile:
	// keep it in a directory of the test's own too, but a short one, as
	// a socket's path has at most 107 bytes (t.TempDir holds the test's
	// name).
	tmp, err := os.MkdirTemp("", "chromium")
	if err != nil {
		t.Fatal(err)
	}

	// The timeout is the whole browser's: chromedp binds the browser's
	// life to the context of its first action.
	base, cancelBase := context.WithTimeout(context.Background(), c.timeout)
	alloc, cancelAlloc := chromedp.NewExecAllocator(base,
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Env("TMPDIR="+tmp),
		chromedp.WindowSize(c.width, c.height),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	// cancelAlloc waits for the browser to exit, before its directories
	// go (t.TempDir's cleanup was registered earlier, so runs later).
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		cancelBase()
		os.RemoveAll(tmp)
	})

	// The override makes the viewport exactly the size asked, whatever
	// the window's frame, and carries the mobile emulation.
	viewport := []chromedp.EmulateViewportOption{chromedp.EmulatePortrait}
	if c.mobile {
		viewport = append(viewport, chromedp.EmulateMobile, chromedp.EmulateTouch)
	}
	steps := []chromedp.Action[chromedp.Void]{chromedp.EmulateViewport(int64(c.width), int64(c.height), viewport...)}
	if c.dark {
		steps = append(steps, chromedp.Func(func(ctx context.Context, tab *chromedp.Target) error {
			_, err := cdp.Call(ctx, tab, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
				Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}},
			})
			return err
		}))
	}
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// BasicAuth answers the HTTP basic-authentication challenges of the tab
// of ctx (a context from New) with user and password, the way a user
// types them into the browser's login dialog: for the page's navigation
// and for the page's own fetch() calls. Like that user, it answers each
// request's challenge once: when the server refuses the credentials, the
// page gets the 401. Call it before the navigation; it lasts as long as
// ctx.
func BasicAuth(ctx context.Context, user, password string) error {
	// Subscribe before enabling, so no request is paused unseen.
	paused := chromedp.Events(ctx, fetch.RequestPaused)
	challenges := chromedp.Events(ctx, fetch.AuthRequired)
	if _, err := chromedp.Call(ctx, fetch.Enable, fetch.EnableParams{HandleAuthRequests: new(true)}); err != nil {
		return fmt.Errorf("enable the Fetch domain: %w", err)
	}
	// Each range runs on a goroutine of its own, outside chromedp's
	// reading loop, where a CDP call could not get its answer. A call
	// fails when a navigation or the page cancelled the request
	// meanwhile: nothing is left to answer then.
	go func() {
		for ev, err := range paused {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
		}
	}()
	go func() {
		answered := map[fetch.RequestID]bool{}
		for ev, err := range challenges {
			if err != nil {
				return
			}
			response := &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseProvideCredentials, Username: user, Password: password}
			if answered[ev.RequestID] {
				// The server refused these credentials: dismiss the
				// dialog rather than send them for ever.
				response = &fetch.AuthChallengeResponse{Response: fetch.AuthChallengeResponseResponseCancelAuth}
			}
			answered[ev.RequestID] = true
			_, _ = chromedp.Call(ctx, fetch.ContinueWithAuth, fetch.ContinueWithAuthParams{RequestID: ev.RequestID, AuthChallengeResponse: response})
		}
	}()
	return nil
}

// AllowClipboard lets the pages in the browser of ctx (a context from
// New) read and write the clipboard without asking, as for a user who
// allowed it, and keeps the tab focused, which the clipboard API needs.
func AllowClipboard(ctx context.Context) error {
	for _, name := range []string{"clipboard-read", "clipboard-write"} {
		_, err := chromedp.CallBrowser(ctx, browser.SetPermission, browser.SetPermissionParams{
			Permission: &browser.PermissionDescriptor{Name: name},
			Setting:    browser.PermissionSettingGranted,
		})
		if err != nil {
			return fmt.Errorf("grant %s: %w", name, err)
		}
	}
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		return fmt.Errorf("emulate focus: %w", err)
	}
	return nil
}

// ClipboardText returns the text on the clipboard, as the page of ctx
// reads it; see AllowClipboard.
func ClipboardText(ctx context.Context) (string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[string](`navigator.clipboard.readText()`, chromedp.EvalAwaitPromise))
}

// DownloadsTo makes the browser of ctx (a context from New) save
// downloads in dir under the names the server suggests, without asking.
// A name already in dir gets a " (1)" suffix, as in any Chromium.
func DownloadsTo(ctx context.Context, dir string) error {
	_, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior:     browser.SetDownloadBehaviorBehaviorAllow,
		DownloadPath: dir,
	})
	if err != nil {
		return fmt.Errorf("set the download directory: %w", err)
	}
	return nil
}

// WaitDownload waits until the download name is complete in dir (the
// directory given to DownloadsTo) and returns its content. Chromium
// writes a download to a .crdownload file and renames it when done.
func WaitDownload(t testing.TB, dir, name string) []byte {
	t.Helper()
	path := filepath.Join(dir, name)
	testwait.For(t, testwait.Generous, "the download "+name, func() bool {
		if _, err := os.Stat(path); err != nil {
			return false
		}
		partial, _ := filepath.Glob(filepath.Join(dir, "*.crdownload"))
		return len(partial) == 0
	})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the download: %v", err)
	}
	return b
}
