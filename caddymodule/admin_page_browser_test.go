package caddymodule_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/browsertest"
	"github.com/keygate/keygate/internal/testwait"
	"github.com/keygate/keygate/keystore"
)

// TestAdminPageInBrowser is an administrator's session on the Web API
// Keys page in headless Chromium: log in, create a share key with "Get
// Shares" and "List Shares", copy and download its token and use it on
// the share API, reveal it again, restrict its allowed IPs and see the
// next request refused, see invalid fields named beside them, delete the
// key with confirmation, add and remove a template; a cross-site form
// post from another origin is refused. axe-core checks every state, on a
// laptop, and on a phone in the dark.
func TestAdminPageInBrowser(t *testing.T) { eachBackend(t, testAdminPageInBrowser) }

func testAdminPageInBrowser(t *testing.T, b backend) {
	browsertest.Chromium(t)
	startGateway(t, b, adminPageSite(t, ssoProxy(t)))
	existing := createKey(t, map[string]any{"service": "contracts", "name": "ci", "owner": "bob", "privileges": []string{"get", "search"}})

	ctx := browsertest.New(t)
	downloads := t.TempDir()
	must(t, "log in", browsertest.BasicAuth(ctx, pageUser, pagePassword))
	must(t, "downloads", browsertest.DownloadsTo(ctx, downloads))
	must(t, "clipboard", browsertest.AllowClipboard(ctx))
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		must(t, "read "+sel, err)
		return s
	}
	value := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Value(chromedp.CSS(sel)))
		must(t, "read "+sel, err)
		return s
	}
	waitStatus := func(holding string) {
		t.Helper()
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](
			fmt.Sprintf(`document.getElementById("status").textContent.includes(%q)`, holding), chromedp.WithPollingTimeout(testwait.Generous)))
		if err != nil {
			t.Fatalf("the status line %q does not say %q: %v", text("#status"), holding, err)
		}
	}

	must(t, "open the page", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS(`#panel-contracts tr[data-id="`+existing.ID+`"]`)),
	))
	if got := text("#user"); got != pageUser {
		t.Errorf("signed in as %q", got)
	}
	row := text(`#panel-contracts tr[data-id="` + existing.ID + `"]`)
	for _, want := range []string{"ci", existing.TokenPrefix, "get", "search", "no limit", "any", "bob", "created", "modified", "never used"} {
		if !strings.Contains(row, want) {
			t.Errorf("the contract key's row lacks %q: %q", want, row)
		}
	}
	if strings.Contains(row, existing.Token) {
		t.Error("the token is on the page unasked")
	}
	browsertest.Axe(t, ctx, "the contract keys")

	// Create a share key.
	must(t, "open the create form", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("tab-share")),
		chromedp.WaitVisible(chromedp.ID("panel-share")),
		chromedp.Click(chromedp.CSS(`#panel-share .create-key`)),
		chromedp.WaitVisible(chromedp.ID("key-form")),
	))
	labels := text("#key-form")
	for _, want := range []string{"Key Name", "Description", "Owner", "Not valid before", "Not valid after", "Allowed IPs", "Get Shares", "List Shares", "Create Shares", "Delete Shares", "Admin projects"} {
		if !strings.Contains(labels, want) {
			t.Errorf("the create form lacks the label %q", want)
		}
	}
	browsertest.Axe(t, ctx, "the create form")
	must(t, "create", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("f-name"), "browser key"),
		chromedp.SendKeys(chromedp.ID("f-description"), "made in the browser test"),
		chromedp.SendKeys(chromedp.ID("f-owner"), "bob"),
		chromedp.Click(chromedp.ID("p-get")),
		chromedp.Click(chromedp.ID("p-list")),
	))
	// Twice, as an impatient double click: one key is made.
	_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const b = document.getElementById("key-save"); b.click(); b.click(); return true; })()`))
	must(t, "double-click Create key", err)
	must(t, "the new token", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.ID("token-value"))))
	token := value("#token-value")
	if !strings.HasPrefix(token, "kg_") {
		t.Fatalf("the new token %q", token)
	}
	browsertest.Axe(t, ctx, "the new token")
	must(t, "copy", chromedp.Do(ctx, chromedp.Click(chromedp.ID("token-copy"))))
	waitStatus("Copied")
	if got, err := browsertest.ClipboardText(ctx); err != nil || got != token {
		t.Errorf("the clipboard holds %q (%v)", got, err)
	}
	must(t, "download", chromedp.Do(ctx, chromedp.Click(chromedp.ID("token-download"))))
	downloaded := strings.TrimSpace(string(browsertest.WaitDownload(t, downloads, "browser-key.txt")))
	if downloaded != token {
		t.Fatalf("the downloaded token %q, shown %q", downloaded, token)
	}
	must(t, "close the token", chromedp.Do(ctx, chromedp.Click(chromedp.ID("token-done")), chromedp.WaitNotVisible(chromedp.ID("token-dialog"))))
	if v := value("#token-value"); v != "" {
		t.Error("the token stays in the page after its dialog closed")
	}
	if html, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`)); err != nil || strings.Contains(html, token) {
		t.Errorf("the token is still in the page's HTML (%v)", err)
	}

	// The downloaded token works on the share API.
	share := func() response {
		return do(t, http.MethodGet, siteURL+"/webapi/share?userId=bob", nil, bearer(downloaded)...)
	}
	if r := share(); r.status != http.StatusOK {
		t.Fatalf("the downloaded token on the share API: %d %s", r.status, r.body)
	}
	var keys []keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys?service=share", nil).json(t, &keys)
	if len(keys) != 1 || keys[0].Name != "browser key" || keys[0].Owner != "bob" || strings.Join(privileges(keys[0]), ",") != "get,list" || keys[0].Description != "made in the browser test" {
		t.Fatalf("the stored key: %+v", keys)
	}
	id := keys[0].ID
	rowSel := `#panel-share tr[data-id="` + id + `"]`

	// Reveal it again, and download it from its row.
	must(t, "reveal", chromedp.Do(ctx,
		chromedp.WaitVisible(chromedp.CSS(rowSel)),
		chromedp.Click(chromedp.CSS(rowSel+` button.reveal`)),
		chromedp.WaitVisible(chromedp.ID("token-value")),
	))
	if got := value("#token-value"); got != token {
		t.Errorf("revealed %q, want the key's token", got)
	}
	must(t, "close the token", chromedp.Do(ctx, chromedp.Click(chromedp.ID("token-done")), chromedp.WaitNotVisible(chromedp.ID("token-dialog"))))
	must(t, "remove the first download", os.Remove(filepath.Join(downloads, "browser-key.txt")))
	must(t, "download from the row", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(rowSel+` button.download`))))
	if got := strings.TrimSpace(string(browsertest.WaitDownload(t, downloads, "browser-key.txt"))); got != token {
		t.Errorf("downloaded from the row: %q", got)
	}

	// Edit: allowed IPs that exclude the test's client. What the form
	// cannot show exactly (a fraction of a second, CR LF line ends) and
	// was not touched stays as the API set it.
	const after, description = "2031-01-31T12:00:45.25Z", "line one\r\nline two"
	if r := do(t, http.MethodPatch, adminURL+"/webapi/keys/"+id, map[string]any{"notValidAfter": after, "description": description}); r.status != http.StatusOK {
		t.Fatalf("set through the API: %d %s", r.status, r.body)
	}
	must(t, "edit", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/admin/#share"),
		chromedp.WaitVisible(chromedp.CSS(rowSel)),
		chromedp.Click(chromedp.CSS(rowSel+` button.edit`)),
		chromedp.WaitVisible(chromedp.ID("key-form")),
	))
	if got := value("#f-name"); got != "browser key" {
		t.Errorf("the edit form shows the name %q", got)
	}
	must(t, "restrict", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("f-allowedIps"), "203.0.113.0/24"),
		chromedp.Click(chromedp.ID("key-save")),
		chromedp.WaitNotVisible(chromedp.ID("key-dialog")),
	))
	waitStatus("Saved key browser key")
	if r := share(); r.status != http.StatusForbidden || r.problem(t).Code != "ip_not_allowed" {
		t.Fatalf("after restricting the allowed IPs: %d %s", r.status, r.body)
	}
	if row := text(rowSel); !strings.Contains(row, "203.0.113.0/24") {
		t.Errorf("the row does not show the allowed IPs: %q", row)
	}
	var edited keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil).json(t, &edited)
	if edited.NotValidAfter == nil || edited.NotValidAfter.Format(time.RFC3339Nano) != after || edited.Description != description {
		t.Errorf("the edit changed what it did not touch: notValidAfter %v, description %q", edited.NotValidAfter, edited.Description)
	}

	// Invalid fields: each error beside its field, nothing created.
	must(t, "an invalid key", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#panel-share .create-key`)),
		chromedp.WaitVisible(chromedp.ID("key-form")),
		chromedp.SendKeys(chromedp.ID("f-name"), "bad"),
		chromedp.SendKeys(chromedp.ID("f-owner"), "bob"),
		chromedp.SendKeys(chromedp.ID("f-allowedIps"), "10.0.0.300"),
		// A date picker takes no keystrokes here; set the values as it would.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.getElementById("f-notValidBefore").value = "2030-01-02T00:00:00";
				document.getElementById("f-notValidAfter").value = "2030-01-01T00:00:00"; true`)(ctx, tg)
			return err
		}),
		chromedp.Click(chromedp.ID("key-save")),
		chromedp.WaitVisible(chromedp.ID("e-allowedIps")),
	))
	for _, f := range []string{"privileges", "allowedIps", "notValidAfter"} {
		if msg := text("#e-" + f); msg == "" {
			t.Errorf("no error beside %s", f)
		}
	}
	if inv, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("f-allowedIps").getAttribute("aria-invalid")`)); err != nil || inv != "true" {
		t.Errorf("Allowed IPs not marked invalid: %q %v", inv, err)
	}
	browsertest.Axe(t, ctx, "the create form with errors")
	must(t, "cancel", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#key-form .cancel`)), chromedp.WaitNotVisible(chromedp.ID("key-dialog"))))
	do(t, http.MethodGet, adminURL+"/webapi/keys?service=share", nil).json(t, &keys)
	if len(keys) != 1 {
		t.Fatalf("the invalid create made a key: %+v", keys)
	}

	// A cross-site form post, from a page of another origin that the
	// logged-in administrator's browser opens.
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><title>prize</title><form id="f" method="post" action="%s/admin/webapi/keys">
<input name="service" value="share"><input name="name" value="evil"><input name="owner" value="mallory"><input name="privileges" value="get">
</form><script>document.getElementById("f").submit()</script>`, siteURL)
	}))
	defer evil.Close()
	must(t, "the other site's form", chromedp.Do(ctx, chromedp.Navigate(evil.URL)))
	_, err = chromedp.Run(ctx, chromedp.Poll[bool](`location.pathname === "/admin/webapi/keys" && document.readyState === "complete"`, chromedp.WithPollingTimeout(testwait.Generous)))
	must(t, "the other site's form posted", err)
	if body := text("body"); !strings.Contains(body, `"status":403`) || !strings.Contains(body, "another origin") {
		t.Errorf("the cross-site post got %q", body)
	}
	do(t, http.MethodGet, adminURL+"/webapi/keys?service=share", nil).json(t, &keys)
	if len(keys) != 1 {
		t.Fatalf("the cross-site post made a key: %+v", keys)
	}

	// Disable, after confirming, and enable again.
	must(t, "back to the page", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/admin/#share"),
		chromedp.WaitVisible(chromedp.CSS(rowSel)),
		chromedp.Click(chromedp.CSS(rowSel+` button.disable`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
	))
	if q := text("#confirm-dialog"); !strings.Contains(q, "Disable key browser key ("+keys[0].TokenPrefix+"…)?") || !strings.Contains(q, "key_disabled") {
		t.Errorf("the confirmation says %q", q)
	}
	must(t, "disable", chromedp.Do(ctx, chromedp.Click(chromedp.ID("confirm-yes"))))
	waitStatus("Disabled key browser key")
	must(t, "the badge", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(rowSel+` .disabled-badge`)), chromedp.WaitVisible(chromedp.CSS(rowSel+` button.enable`))))
	browsertest.Axe(t, ctx, "a disabled key")
	if r := share(); r.status != http.StatusUnauthorized || r.problem(t).Code != "key_disabled" {
		t.Fatalf("the disabled key's token: %d %s", r.status, r.body)
	}
	must(t, "enable", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(rowSel+` button.enable`))))
	waitStatus("Enabled key browser key")
	must(t, "enabled", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(rowSel+` button.disable`))))
	if r := share(); r.status != http.StatusForbidden || r.problem(t).Code != "ip_not_allowed" { // as before: its allowed IPs
		t.Fatalf("the enabled key's token: %d %s", r.status, r.body)
	}

	// Roll, with a grace period of an hour: a new token shown once, and
	// the previous one still answers (its allowed IPs refuse this address,
	// past the key check).
	must(t, "roll", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(rowSel+` button.roll`)),
		chromedp.WaitVisible(chromedp.ID("roll-yes")),
	))
	if q := text("#roll-dialog"); !strings.Contains(q, "Roll key browser key ("+keys[0].TokenPrefix+"…)?") {
		t.Errorf("the roll dialog says %q", q)
	}
	browsertest.Axe(t, ctx, "the roll dialog")
	must(t, "an hour's grace", chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("roll-grace"), "3600"),
		chromedp.Click(chromedp.ID("roll-yes")),
		chromedp.WaitVisible(chromedp.ID("token-value")),
	))
	rolledToken := value("#token-value")
	must(t, "close the rolled token", chromedp.Do(ctx, chromedp.Click(chromedp.ID("token-done")), chromedp.WaitNotVisible(chromedp.ID("token-dialog"))))
	waitStatus("Rolled key browser key")
	var afterRoll keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil).json(t, &afterRoll)
	if !strings.HasPrefix(rolledToken, afterRoll.TokenPrefix) || rolledToken == downloaded || afterRoll.PreviousTokenExpiry == nil ||
		time.Until(*afterRoll.PreviousTokenExpiry) < 59*time.Minute || time.Until(*afterRoll.PreviousTokenExpiry) > time.Hour {
		t.Errorf("after the roll: token %q, key %+v", rolledToken, afterRoll)
	}
	for _, tok := range []string{downloaded, rolledToken} {
		if r := do(t, http.MethodGet, siteURL+"/webapi/share?userId=bob", nil, bearer(tok)...); r.status != http.StatusForbidden || r.problem(t).Code != "ip_not_allowed" {
			t.Errorf("a token after the roll: %d %s", r.status, r.body)
		}
	}

	// Delete, after confirming.
	must(t, "the delete button", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(rowSel+` button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
	))
	if q := text("#confirm-dialog"); !strings.Contains(q, "Delete key browser key ("+afterRoll.TokenPrefix+"…)?") {
		t.Errorf("the confirmation says %q", q)
	}
	browsertest.Axe(t, ctx, "the delete confirmation")
	must(t, "cancel the delete", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#confirm-dialog .cancel`)), chromedp.WaitNotVisible(chromedp.ID("confirm-dialog"))))
	if r := do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil); r.status != http.StatusOK {
		t.Fatalf("a cancelled delete deleted: %d", r.status)
	}
	must(t, "delete", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(rowSel+` button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
		chromedp.Click(chromedp.ID("confirm-yes")),
	))
	waitStatus("Deleted key browser key")
	if r := share(); r.status != http.StatusUnauthorized {
		t.Fatalf("the deleted key's token: %d %s", r.status, r.body)
	}

	// Templates.
	must(t, "add a template", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("tab-templates")),
		chromedp.Click(chromedp.ID("add-template")),
		chromedp.WaitVisible(chromedp.ID("template-form")),
		chromedp.SendKeys(chromedp.ID("t-id"), "T-BROWSER"),
		chromedp.SendKeys(chromedp.ID("t-collectionId"), "C-1"),
		chromedp.SendKeys(chromedp.ID("t-title"), "Made in a browser"),
		chromedp.SendKeys(chromedp.ID("t-body"), "The parties agree."),
		chromedp.Click(chromedp.ID("template-save")),
		chromedp.WaitVisible(chromedp.CSS(`#panel-templates tr[data-id="T-BROWSER"]`)),
	))
	browsertest.Axe(t, ctx, "the templates")
	if r := do(t, http.MethodGet, adminURL+"/webapi/templates/T-BROWSER", nil); r.status != http.StatusOK || !strings.Contains(string(r.body), "The parties agree.") {
		t.Fatalf("the template: %d %s", r.status, r.body)
	}
	must(t, "remove it", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#panel-templates tr[data-id="T-BROWSER"] button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
		chromedp.Click(chromedp.ID("confirm-yes")),
		chromedp.WaitNotPresent(chromedp.CSS(`#panel-templates tr[data-id="T-BROWSER"]`)),
	))
	if r := do(t, http.MethodGet, adminURL+"/webapi/templates/T-BROWSER", nil); r.status != http.StatusNotFound {
		t.Fatalf("the removed template: %d", r.status)
	}

	// A phone, in the dark: the same page, readable, nothing wider than
	// the screen.
	phone := browsertest.New(t, browsertest.WindowSize(390, 844), browsertest.Mobile(), browsertest.DarkScheme())
	must(t, "log in on the phone", browsertest.BasicAuth(phone, pageUser, pagePassword))
	must(t, "open the page on the phone", chromedp.Do(phone,
		chromedp.Navigate(siteURL+"/admin/"),
		chromedp.WaitVisible(chromedp.CSS(`#panel-contracts tr[data-id="`+existing.ID+`"]`)),
	))
	layout, err := chromedp.Run(phone, chromedp.Evaluate[[]float64](`[document.documentElement.scrollWidth, window.innerWidth,
		matchMedia("(prefers-color-scheme: dark)").matches ? 1 : 0]`))
	must(t, "measure", err)
	if layout[0] > layout[1] || layout[2] != 1 {
		t.Errorf("on the phone the page is %v px wide in a %v px window (dark: %v)", layout[0], layout[1], layout[2])
	}
	browsertest.Axe(t, phone, "the page on a phone, dark")
}

func privileges(k keystore.Key) []string {
	out := make([]string, len(k.Privileges))
	for i, p := range k.Privileges {
		out[i] = string(p)
	}
	return out
}
