package caddymodule_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/browsertest"
)

// TestDocsPageInBrowser opens the API reference as a client developer
// does, in headless Chromium on a desktop and on a phone in the dark
// scheme: the page renders with its stylesheet, loads nothing from
// another origin, and axe-core finds no serious or critical
// accessibility violation. A screenshot of each is kept, in
// $KEYGATE_TEST_ARTIFACTS when set.
func TestDocsPageInBrowser(t *testing.T) {
	browsertest.Chromium(t)
	startGateway(t, bolt, defaultSite)

	r := do(t, http.MethodGet, siteURL+"/webapi/docs", nil)
	if r.status != http.StatusOK || r.header.Get("Content-Security-Policy") != "default-src 'none'; style-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'" ||
		r.header.Get("Content-Type") != "text/html; charset=utf-8" || r.header.Get("ETag") == "" {
		t.Fatalf("docs: %d %v", r.status, r.header)
	}
	if again := do(t, http.MethodGet, siteURL+"/webapi/docs", nil, "If-None-Match", r.header.Get("ETag")); again.status != http.StatusNotModified {
		t.Errorf("revalidation: %d", again.status)
	}
	if css := do(t, http.MethodGet, siteURL+"/webapi/docs/docs.css", nil); css.status != http.StatusOK || css.header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Errorf("stylesheet: %d %v", css.status, css.header)
	}
	if nf := do(t, http.MethodGet, siteURL+"/webapi/docs/other", nil); nf.status != http.StatusNotFound {
		t.Errorf("/webapi/docs/other: %d", nf.status)
	}
	if post := do(t, http.MethodPost, siteURL+"/webapi/docs", nil); post.status != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", post.status)
	}

	shots := os.Getenv("KEYGATE_TEST_ARTIFACTS")
	if shots == "" {
		shots = t.TempDir()
	}
	for _, view := range []struct {
		name string
		opts []browsertest.Option
	}{
		{"desktop", []browsertest.Option{browsertest.WindowSize(1400, 1000)}},
		{"phone-dark", []browsertest.Option{browsertest.Mobile(), browsertest.DarkScheme()}},
	} {
		ctx := browsertest.New(t, view.opts...)
		must(t, "open the reference", chromedp.Do(ctx,
			chromedp.Navigate(siteURL+"/webapi/docs"),
			chromedp.WaitVisible(chromedp.CSS(`#op-createContract`)),
		))
		styled, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`getComputedStyle(document.querySelector("nav")).backgroundColor !== "rgba(0, 0, 0, 0)"`))
		must(t, "read the style", err)
		if !styled {
			t.Errorf("%s: the stylesheet is not applied", view.name)
		}
		origins, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`performance.getEntriesByType("resource").map(e => new URL(e.name).origin).filter(o => o !== location.origin)`))
		must(t, "read the resources", err)
		if len(origins) > 0 {
			t.Errorf("%s: the page loaded from %v", view.name, origins)
		}
		text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#op-createContract`)))
		must(t, "read an operation", err)
		for _, want := range []string{"POST", "/webapi/contracts", "Create a contract", "Idempotency-Key", "templateId", "201", "Example"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s: the create operation lacks %q", view.name, want)
			}
		}
		browsertest.Axe(t, ctx, "the API reference ("+view.name+")")
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		must(t, "screenshot", err)
		must(t, "keep the screenshot", os.WriteFile(filepath.Join(shots, "api-reference-"+view.name+".png"), png, 0o644))
	}
}
