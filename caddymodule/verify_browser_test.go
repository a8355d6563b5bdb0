package caddymodule_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/browsertest"
)

// TestVerifyPageInBrowser checks a document the way anyone does: the
// /verify page in headless Chromium, a file chosen and sent with the
// form; axe-core finds no serious or critical accessibility violation in
// the empty form, an answer or a refusal. (TestSigningThroughCaddy checks
// the answers for sealed and changed documents.)
func TestVerifyPageInBrowser(t *testing.T) {
	browsertest.Chromium(t)
	startGateway(t, bolt, defaultSite)
	dir := t.TempDir()
	stranger := filepath.Join(dir, "stranger.pdf")
	must(t, "a file", os.WriteFile(stranger, []byte("%PDF-1.4\n% a stranger's document\n%%EOF\n"), 0o600))
	notPDF := filepath.Join(dir, "notes.pdf")
	must(t, "a file", os.WriteFile(notPDF, []byte("just notes"), 0o600))

	ctx := browsertest.New(t)
	must(t, "open the page", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/verify"),
		chromedp.WaitVisible(chromedp.CSS(`input[type=file]`)),
	))
	browsertest.Axe(t, ctx, "the verify page")

	check := func(file, wantHeading string) {
		t.Helper()
		// From a fresh page, so that the answer waited for is the new one.
		must(t, "check "+file, chromedp.Do(ctx,
			chromedp.Navigate(siteURL+"/verify"),
			chromedp.WaitVisible(chromedp.CSS(`input[type=file]`)),
			chromedp.SetUploadFiles(chromedp.CSS(`input[type=file]`), []string{file}),
			chromedp.Click(chromedp.CSS(`button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`#outcome`)),
		))
		heading, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#outcome`)))
		must(t, "read the answer", err)
		if !strings.Contains(heading, wantHeading) {
			t.Errorf("%s: answer %q, want %q", file, heading, wantHeading)
		}
		browsertest.Axe(t, ctx, "the verify page: "+wantHeading)
	}
	check(stranger, "Not a document of this gateway")
	check(notPDF, "Not checked")
}
