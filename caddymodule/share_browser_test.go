package caddymodule_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/browsertest"
)

// TestSharePageInBrowser opens the public share page in headless Chromium
// as a visitor does: locked, after a wrong password, unlocked; axe-core
// finds no serious or critical accessibility violation in any state.
func TestSharePageInBrowser(t *testing.T) { eachBackend(t, testSharePageInBrowser) }

func testSharePageInBrowser(t *testing.T, b backend) {
	browsertest.Chromium(t)
	startGateway(t, b, defaultSite)
	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	locked, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": "DEMO-42", "projectId": "P1", "password": "open sesame",
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{
			"summary":  map[string]any{"fieldPermissions": []string{"VIEW", "EDIT"}},
			"priority": map[string]any{"fieldPermissions": []string{"VIEW"}},
		}}})

	ctx := browsertest.New(t)
	must(t, "open the locked share", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/s/"+locked.UUID),
		chromedp.WaitVisible(chromedp.CSS(`input[name=password]`)),
	))
	browsertest.Axe(t, ctx, "the locked share page")

	must(t, "try a wrong password", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "open sesam"),
		chromedp.Submit(chromedp.CSS(`input[name=password]`)),
		chromedp.WaitVisible(chromedp.CSS(`[role=alert]`)),
	))
	browsertest.Axe(t, ctx, "the locked share page after a wrong password")

	must(t, "unlock", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "open sesame"),
		chromedp.Submit(chromedp.CSS(`input[name=password]`)),
		chromedp.WaitVisible(chromedp.CSS(`table`)),
	))
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	must(t, "read the page", err)
	for _, want := range []string{"DEMO-42", "summary", "priority"} {
		if !strings.Contains(text, want) {
			t.Errorf("the unlocked page lacks %q:\n%s", want, text)
		}
	}
	browsertest.Axe(t, ctx, "the unlocked share page")
}
