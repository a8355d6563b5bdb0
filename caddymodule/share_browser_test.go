package caddymodule_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/browsertest"
	"github.com/keygate/keygate/internal/testkit/redminetest"
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

// TestTrackerPagesInBrowser opens the pages of shares of a real Redmine's
// issues in headless Chromium as a customer does: the shared issue with
// its forms, a comment sent from its form (no script), the list of a
// JQL share, a board and a timeline, and the signing page of a contract
// made from a wiki page, its Markdown rendered; axe-core finds no
// serious or critical accessibility violation on any of them.
func TestTrackerPagesInBrowser(t *testing.T) {
	browsertest.Chromium(t)
	rm := redminetest.Start(t)
	rm.CreateProject(t, "acme", "ACME")
	bot := rm.CreateUser(t, "keygate", "acme")
	issue := rm.CreateIssue(t, "acme", "Printer jams", "It **jams** on page 2.\n\n- after 10 pages\n- with duplex on",
		map[string]any{"start_date": "2026-11-01", "due_date": "2026-12-15"})
	rm.AddNote(t, issue, "We ordered a part.", false)
	rm.UploadAttachment(t, issue, "log.txt", []byte("the printer's log"))
	rm.CreateWikiPage(t, "acme", "NDA", "# Mutual NDA\n\nBoth parties keep it **secret**:\n\n1. for five years\n2. worldwide\n\n> Signed below.")
	redmineGateway(t, rm, bot.APIKey)
	alice := shrKey(t, "alice", nil, shrAllPrivileges...)
	fields := map[string]any{"fieldConfigs": map[string]any{
		"summary":     map[string]any{"fieldPermissions": []string{"VIEW", "EDIT"}},
		"description": map[string]any{"fieldPermissions": []string{"VIEW", "VIEW_CONTENT"}},
		"status":      map[string]any{"fieldPermissions": []string{"VIEW"}},
		"startdate":   map[string]any{"fieldPermissions": []string{"VIEW"}},
		"duedate":     map[string]any{"fieldPermissions": []string{"VIEW"}},
		"comment":     map[string]any{"fieldPermissions": []string{"VIEW", "ADD"}},
		"attachment":  map[string]any{"fieldPermissions": []string{"VIEW", "VIEW_CONTENT", "ADD"}},
	}}
	one, _ := shrCreate(t, alice, map[string]any{"type": "ISSUE", "issueId": strconv.Itoa(issue), "fieldsConfig": fields})
	list, _ := shrCreate(t, alice, map[string]any{"type": "JQL", "projectId": "acme", "jql": `text ~ "printer"`, "fieldsConfig": fields})
	timeline, _ := shrCreate(t, alice, map[string]any{"type": "TIMELINE", "projectId": "acme", "fieldsConfig": fields})

	ctx := browsertest.New(t)
	must(t, "open the shared issue", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/s/"+one.UUID),
		chromedp.WaitVisible(chromedp.CSS(`textarea[name=body]`)),
	))
	browsertest.Axe(t, ctx, "the page of a shared issue")
	must(t, "send a comment", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`textarea[name=body]`), "Thanks, it works now."),
		chromedp.Submit(chromedp.CSS(`textarea[name=body]`)),
		// Back on the page, the comment among the others.
		chromedp.WaitVisible(chromedp.Search(`//div[@class="comment"][contains(., "Thanks, it works now.")]`)),
	))
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main`)))
	must(t, "read the page", err)
	for _, want := range []string{"Printer jams", "jams on page 2", "with duplex on", "We ordered a part.", "Thanks, it works now.", "log.txt"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page lacks %q:\n%s", want, text)
		}
	}
	for _, page := range []struct{ name, path, wait string }{
		{"the list of a JQL share", "/s/" + list.UUID, `table a`},
		{"an issue of the list", "/s/" + list.UUID + "/issues/" + strconv.Itoa(issue), `textarea[name=body]`},
		{"the timeline", "/s/" + timeline.UUID, `svg.timeline`},
	} {
		must(t, "open "+page.name, chromedp.Do(ctx,
			chromedp.Navigate(siteURL+page.path),
			chromedp.WaitVisible(chromedp.CSS(page.wait)),
		))
		browsertest.Axe(t, ctx, page.name)
	}

	nda := ctrCreate(t, ctrKey(t, "alice", "create"), ctrSimple("wiki:acme:NDA", "NDA from the wiki",
		map[string]any{"fullName": "Bea Browser", "accessKind": "url", "signerSigningMethods": []string{"render"}}))
	must(t, "open the signing page", chromedp.Do(ctx,
		chromedp.Navigate(nda.Signers[0].AccessURL),
		chromedp.WaitVisible(chromedp.CSS(`.doc .body h1`)),
	))
	doc, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.doc`)))
	must(t, "read the document", err)
	for _, want := range []string{"Mutual NDA", "secret", "for five years", "The text of wiki page NDA of project acme, version 1"} {
		if !strings.Contains(doc, want) {
			t.Errorf("the signing page's document lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "**") || strings.Contains(doc, "# Mutual") {
		t.Errorf("the signing page shows the markup:\n%s", doc)
	}
	browsertest.Axe(t, ctx, "the signing page of a contract from a wiki page")
}
