package caddymodule_test

import (
	"html"
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

	// The page's example of a create is one the gateway takes as it is.
	page := string(r.body)
	i := strings.Index(page, `id="op-createContract"`)
	j := strings.Index(page[i:], "<pre><code>")
	k := strings.Index(page[i+j:], "</code></pre>")
	if i < 0 || j < 0 || k < 0 {
		t.Fatal("no example on the create operation")
	}
	example := html.UnescapeString(page[i+j+len("<pre><code>") : i+j+k])
	if tpl := do(t, http.MethodPost, adminURL+"/webapi/templates", map[string]any{"id": "PAGE-42", "collectionId": "LEGAL",
		"title": "NDA", "body": "Confidential."}); tpl.status != http.StatusCreated {
		t.Fatalf("template: %d %s", tpl.status, tpl.body)
	}
	key := createKey(t, map[string]any{"service": "contracts", "name": "docs", "owner": "alice", "privileges": []string{"create"}})
	if created := do(t, http.MethodPost, siteURL+"/webapi/contracts", example, append(bearer(key.Token), "Content-Type", "application/json")...); created.status != http.StatusCreated {
		t.Errorf("the page's example of a create: %d %s\n%s", created.status, created.body, example)
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
		{"phone-dark", []browsertest.Option{browsertest.WindowSize(390, 844), browsertest.Mobile(), browsertest.DarkScheme()}},
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
		// Nothing runs off the side of the screen: wide tables scroll in
		// their own box.
		overflow, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
		must(t, "measure the page", err)
		if overflow > 0 {
			t.Errorf("%s: the page is %d px wider than the screen", view.name, overflow)
		}
		browsertest.Axe(t, ctx, "the API reference ("+view.name+")")
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		must(t, "screenshot", err)
		must(t, "keep the screenshot", os.WriteFile(filepath.Join(shots, "api-reference-"+view.name+".png"), png, 0o644))
	}
}
