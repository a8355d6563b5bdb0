package caddymodule_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/browsertest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/traffic"
)

// TestAdminPageInBrowser is an administrator's session on the Web API
// Keys page in headless Chromium: log in, create a share key with "Get
// Shares" and "List Shares", two rate-limit policies and a monthly quota,
// copy and download its token and use it on the share API until a policy
// refuses it, see the policies and the quota left in its row and its
// usage chart by day and by hour, reveal it again, edit a policy (an
// invalid limit first, named beside its field) and restrict its allowed
// IPs and see the next request refused, see invalid fields named beside
// them, disable, enable and roll it with its limits kept, delete the key
// with confirmation, add and remove a template; a cross-site form post
// from another origin is refused. axe-core checks every state, on a
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
	pg := keysPage{t, ctx}
	text, value, waitStatus := pg.text, pg.value, pg.waitStatus

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
	// Two rate-limit policies and a quota: the fields are there to fill.
	must(t, "two policies and a quota", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("f-add-policy")),
		chromedp.Click(chromedp.ID("f-add-policy")),
		chromedp.WaitVisible(chromedp.ID("f-rateLimits-1-windowSeconds")),
		choose("f-quota-period", "month"),
		chromedp.WaitEnabled(chromedp.ID("f-quota-limit")),
	))
	labels := text("#key-form")
	for _, want := range []string{"Key Name", "Description", "Owner", "Not valid before", "Not valid after", "Allowed IPs", "Get Shares", "List Shares", "Create Shares", "Delete Shares", "Admin projects",
		"Rate limits", "Policy 1", "Policy 2", "Name", "Limit", "Window (seconds)", "Quota", "Period", "Requests per period"} {
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
		chromedp.SendKeys(chromedp.ID("f-rateLimits-0-name"), "burst"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-0-limit"), "20"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-0-windowSeconds"), "1"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-1-name"), "daily"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-1-limit"), "3"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-1-windowSeconds"), "86400"),
		chromedp.SendKeys(chromedp.ID("f-quota-limit"), "100000"),
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
	// The usage chart further down counts this request and the next
	// three in one hour's bar: they start clear of an hour's end.
	clearOfWindowEdge(time.Hour, 2*time.Minute)
	if r := share(); r.status != http.StatusOK {
		t.Fatalf("the downloaded token on the share API: %d %s", r.status, r.body)
	}
	var keys []keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys?service=share", nil).json(t, &keys)
	if len(keys) != 1 || keys[0].Name != "browser key" || keys[0].Owner != "bob" || strings.Join(privileges(keys[0]), ",") != "get,list" || keys[0].Description != "made in the browser test" {
		t.Fatalf("the stored key: %+v", keys)
	}
	wantLimits := []traffic.RateLimit{{Name: "burst", Limit: 20, WindowSeconds: 1}, {Name: "daily", Limit: 3, WindowSeconds: 86400}}
	wantQuota := traffic.Quota{Limit: 100000, Period: traffic.QuotaMonth}
	checkLimits := func(when string, k keystore.Key) {
		t.Helper()
		if !slices.Equal(k.RateLimits, wantLimits) || k.Quota == nil || *k.Quota != wantQuota {
			t.Errorf("%s: the key's rate limits %+v and quota %+v, want %+v and %+v", when, k.RateLimits, k.Quota, wantLimits, wantQuota)
		}
	}
	checkLimits("created on the page", keys[0])
	id := keys[0].ID
	rowSel := `#panel-share tr[data-id="` + id + `"]`
	if row := text(rowSel); !strings.Contains(row, "burst: 20 / 1 s") || !strings.Contains(row, "daily: 3 / 24 h") || !strings.Contains(row, "of 100,000 left this month, resets ") {
		t.Errorf("the new key's row does not show its limits: %q", row)
	}

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

	// Two more requests, and the "daily" policy (3 a day) refuses the next.
	for i := range 2 {
		if r := share(); r.status != http.StatusOK {
			t.Fatalf("request %d of the daily 3: %d %s", i+2, r.status, r.body)
		}
	}
	if r := share(); r.status != http.StatusTooManyRequests || r.problem(t).Code != "rate_limited" {
		t.Fatalf("the fourth request of the day: %d %s", r.status, r.body)
	}
	// The row shows what is left of the quota: the refused request took none.
	var used keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil).json(t, &used)
	if used.QuotaUsed == nil || *used.QuotaUsed != 3 || used.QuotaResetsAt == nil {
		t.Fatalf("the quota used: %v, resets %v", used.QuotaUsed, used.QuotaResetsAt)
	}
	must(t, "reload", chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(rowSel))))
	wantQuotaLine := "quota: 99,997 of 100,000 left this month, resets " + used.QuotaResetsAt.UTC().Format("2006-01-02 15:04") + " UTC"
	if row := text(rowSel); !strings.Contains(row, wantQuotaLine) {
		t.Errorf("the row does not show the quota left %q: %q", wantQuotaLine, row)
	}

	// Its usage: 3 let through and 1 refused, by day and by hour, as bars
	// and as text.
	usageSummary, readChart := pg.usageSummary, pg.readChart
	must(t, "open the usage", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(rowSel+` button.usage`)),
		chromedp.WaitVisible(chromedp.ID("usage-dialog")),
	))
	if got, want := usageSummary("in the last 30 days"), "4 requests in the last 30 days, 1 refused (1 rate limited)."; got != want {
		t.Errorf("the usage by day says %q, want %q", got, want)
	}
	if c := readChart(); c.OK != 1 || c.Refused != 1 || c.Rows < 30 || c.Labels < 4 || c.Role != "img" || !strings.Contains(c.Title, "browser key") ||
		c.TableOK != 3 || c.TableRefused != 1 || !strings.Contains(c.TableText, "1 rate limited") {
		t.Errorf("the usage chart by day: %+v", c)
	}
	if q := text("#usage-limits"); !strings.Contains(q, "burst: 20 / 1 s") || !strings.Contains(q, wantQuotaLine) {
		t.Errorf("the usage dialog's limits: %q", q)
	}
	must(t, "by hour", chromedp.Do(ctx, chromedp.Click(chromedp.ID("usage-hour"))))
	if got, want := usageSummary("in the last 48 hours"), "4 requests in the last 48 hours, 1 refused (1 rate limited)."; got != want {
		t.Errorf("the usage by hour says %q, want %q", got, want)
	}
	if c := readChart(); c.OK != 1 || c.Refused != 1 || c.Rows < 48 || c.TableOK != 3 || c.TableRefused != 1 {
		t.Errorf("the usage chart by hour: %+v", c)
	}
	if p, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`["usage-day", "usage-hour"].map((id) => document.getElementById(id).getAttribute("aria-pressed"))`)); err != nil || strings.Join(p, ",") != "false,true" {
		t.Errorf("the span buttons pressed: %v %v", p, err)
	}
	must(t, "the table", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#usage-dialog summary`)), chromedp.WaitVisible(chromedp.ID("usage-table"))))
	browsertest.Axe(t, ctx, "the usage chart")
	must(t, "close the usage", chromedp.Do(ctx, chromedp.Click(chromedp.ID("usage-done")), chromedp.WaitNotVisible(chromedp.ID("usage-dialog"))))

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
	for sel, want := range map[string]string{"#f-rateLimits-0-name": "burst", "#f-rateLimits-0-limit": "20", "#f-rateLimits-1-windowSeconds": "86400", "#f-quota-period": "month", "#f-quota-limit": "100000"} {
		if got := value(sel); got != want {
			t.Errorf("the edit form shows %s %q, want %q", sel, got, want)
		}
	}
	// A limit of 0 is refused, beside its field; nothing is saved.
	must(t, "an invalid limit", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.ID("f-allowedIps"), "203.0.113.0/24"),
		chromedp.SetValue(chromedp.ID("f-rateLimits-0-limit"), "0"),
		chromedp.Click(chromedp.ID("key-save")),
		chromedp.WaitVisible(chromedp.ID("e-rateLimits-0-limit")),
	))
	if msg := pg.fieldError("f-rateLimits-0-limit", "e-rateLimits-0-limit"); !strings.Contains(msg, "limit") {
		t.Errorf("beside the policy's limit: %q", msg)
	}
	if general, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("key-form-error").hidden && document.getElementById("e-rateLimits-1-limit").hidden`)); err != nil || !general {
		t.Errorf("the error is told elsewhere than beside its field (%v)", err)
	}
	browsertest.Axe(t, ctx, "the edit form with a policy's error")
	var unsaved keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil).json(t, &unsaved)
	checkLimits("after the refused edit", unsaved)
	if len(unsaved.AllowedIPs) != 0 {
		t.Errorf("the refused edit saved the allowed IPs %v", unsaved.AllowedIPs)
	}
	must(t, "restrict, and a burst of 50", chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("f-rateLimits-0-limit"), "50"),
		chromedp.Click(chromedp.ID("key-save")),
		chromedp.WaitNotVisible(chromedp.ID("key-dialog")),
	))
	waitStatus("Saved key browser key")
	wantLimits[0].Limit = 50
	if r := share(); r.status != http.StatusForbidden || r.problem(t).Code != "ip_not_allowed" {
		t.Fatalf("after restricting the allowed IPs: %d %s", r.status, r.body)
	}
	if row := text(rowSel); !strings.Contains(row, "203.0.113.0/24") || !strings.Contains(row, "burst: 50 / 1 s") || !strings.Contains(row, "daily: 3 / 24 h") {
		t.Errorf("the row does not show the allowed IPs and the edited policy: %q", row)
	}
	var edited keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil).json(t, &edited)
	checkLimits("after the edit", edited)
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
		// A policy whose name and window are wrong, and a quota without
		// its limit.
		chromedp.Click(chromedp.ID("f-add-policy")),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-0-name"), "Bad Name"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-0-limit"), "5"),
		chromedp.SendKeys(chromedp.ID("f-rateLimits-0-windowSeconds"), "90000"),
		choose("f-quota-period", "day"),
		// A date picker takes no keystrokes here; set the values as it would.
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`document.getElementById("f-notValidBefore").value = "2030-01-02T00:00:00";
				document.getElementById("f-notValidAfter").value = "2030-01-01T00:00:00"; true`)(ctx, tg)
			return err
		}),
		chromedp.Click(chromedp.ID("key-save")),
		chromedp.WaitVisible(chromedp.ID("e-allowedIps")),
	))
	for _, f := range []string{"privileges", "allowedIps", "notValidAfter", "rateLimits-0-name", "rateLimits-0-windowSeconds", "quota-limit"} {
		if msg := text("#e-" + f); msg == "" {
			t.Errorf("no error beside %s", f)
		}
	}
	if msg := text("#e-rateLimits-0-limit"); msg != "" {
		t.Errorf("an error beside the valid limit: %q", msg)
	}
	pg.fieldError("f-allowedIps", "e-allowedIps")
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
	var enabled keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+id, nil).json(t, &enabled)
	checkLimits("disabled and enabled", enabled)
	if row := text(rowSel); !strings.Contains(row, "burst: 50 / 1 s") || !strings.Contains(row, "left this month") {
		t.Errorf("the enabled key's row lacks its limits: %q", row)
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
	checkLimits("rolled", afterRoll)
	if row := text(rowSel); !strings.Contains(row, "burst: 50 / 1 s") || !strings.Contains(row, "daily: 3 / 24 h") || !strings.Contains(row, "left this month") {
		t.Errorf("the rolled key's row lacks its limits: %q", row)
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
	// A key that made no request: its chart, on the phone.
	must(t, "the usage on the phone", chromedp.Do(phone,
		chromedp.Click(chromedp.CSS(`#panel-contracts tr[data-id="`+existing.ID+`"] button.usage`)),
		chromedp.WaitVisible(chromedp.ID("usage-dialog")),
	))
	_, err = chromedp.Run(phone, chromedp.Poll[bool](`document.getElementById("usage-summary").textContent !== "" && document.querySelector("#usage-chart svg") !== null`,
		chromedp.WithPollingTimeout(testwait.Generous)))
	must(t, "the chart on the phone", err)
	if s, err := chromedp.Run(phone, chromedp.Text(chromedp.ID("usage-summary"))); err != nil || s != "0 requests in the last 30 days, none refused." {
		t.Errorf("the unused key's usage says %q (%v)", s, err)
	}
	layout, err = chromedp.Run(phone, chromedp.Evaluate[[]float64](`(() => { const d = document.getElementById("usage-dialog"), s = document.querySelector("#usage-chart svg");
		return [d.scrollWidth, d.clientWidth, s.getBoundingClientRect().width, s.querySelectorAll("rect").length]; })()`))
	must(t, "measure the chart", err)
	if layout[0] > layout[1] || layout[2] > layout[1] || layout[3] != 0 {
		t.Errorf("on the phone the usage dialog is %v px wide in %v px, its chart %v px with %v bars", layout[0], layout[1], layout[2], layout[3])
	}
	browsertest.Axe(t, phone, "the usage chart on a phone, dark")
}

// TestAdminPageConsumersInBrowser is an administrator's session on the
// Consumers view of the Web API Keys page in headless Chromium: create a
// plan and a consumer that takes it (a second consumer of the same
// external ID is refused beside its field), give a share key the
// consumer and the plan on the key's form, use the key, and see in the
// consumer's row and its details its keys, its limits with its plan's by
// name, what is left of its quota and when it resets, and its requests
// drawn as bars; deleting the consumer while it holds keys, or the plan
// while it is taken, is refused with the problem's message; edit the
// consumer, take the key out of it and delete both. axe-core checks every
// state, on a laptop and on a phone in the dark.
func TestAdminPageConsumersInBrowser(t *testing.T) {
	eachBackend(t, testAdminPageConsumersInBrowser)
}

func testAdminPageConsumersInBrowser(t *testing.T, b backend) {
	browsertest.Chromium(t)
	startGateway(t, b, adminPageSite(t, ssoProxy(t)))
	key := createKey(t, map[string]any{"service": "share", "name": "acme key", "owner": "bob", "privileges": []string{"get", "list"}})
	use := func() response {
		return do(t, http.MethodGet, siteURL+"/webapi/share?userId=bob", nil, bearer(key.Token)...)
	}

	ctx := browsertest.New(t)
	must(t, "log in", browsertest.BasicAuth(ctx, pageUser, pagePassword))
	pg := keysPage{t, ctx}
	text, value, waitStatus := pg.text, pg.value, pg.waitStatus
	// rowHolding waits until the row sel holds every one of want, and
	// returns its text.
	rowHolding := func(sel string, want ...string) string {
		t.Helper()
		js := fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r !== null && %s.every((w) => r.textContent.includes(w)); })()`,
			sel, jsStrings(want))
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingTimeout(testwait.Generous))); err != nil {
			row, _ := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || "(none)"`, sel)))
			t.Fatalf("the row %s does not hold %q: %q", sel, want, row)
		}
		return text(sel)
	}
	must(t, "open the Consumers view", chromedp.Do(ctx,
		chromedp.Navigate(siteURL+"/admin/#consumers"),
		chromedp.WaitVisible(chromedp.CSS(`#consumers .empty`)),
		chromedp.WaitVisible(chromedp.CSS(`#plans .empty`)),
	))
	if sel, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("tab-consumers").getAttribute("aria-selected")`)); err != nil || sel != "true" {
		t.Errorf("the Consumers tab is not selected: %q %v", sel, err)
	}
	browsertest.Axe(t, ctx, "the Consumers view, empty")

	// A plan: a policy per holder and a daily quota.
	must(t, "the plan form", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("create-plan")),
		chromedp.WaitVisible(chromedp.ID("plan-form")),
		chromedp.SendKeys(chromedp.ID("pl-name"), "gold"),
		chromedp.SendKeys(chromedp.ID("pl-description"), "for paying clients"),
		chromedp.Click(chromedp.ID("pl-add-policy")),
		chromedp.SendKeys(chromedp.ID("pl-rateLimits-0-name"), "hourly"),
		chromedp.SendKeys(chromedp.ID("pl-rateLimits-0-limit"), "100"),
		chromedp.SendKeys(chromedp.ID("pl-rateLimits-0-windowSeconds"), "3600"),
		choose("pl-quota-period", "day"),
		chromedp.SendKeys(chromedp.ID("pl-quota-limit"), "1000"),
	))
	browsertest.Axe(t, ctx, "the plan form")
	must(t, "create the plan", chromedp.Do(ctx, chromedp.Click(chromedp.ID("plan-save")), chromedp.WaitNotVisible(chromedp.ID("plan-dialog"))))
	waitStatus("Created plan gold")
	var plans []keystore.Plan
	do(t, http.MethodGet, adminURL+"/webapi/plans", nil).json(t, &plans)
	if len(plans) != 1 || plans[0].Name != "gold" || plans[0].Description != "for paying clients" ||
		!slices.Equal(plans[0].RateLimits, []traffic.RateLimit{{Name: "hourly", Limit: 100, WindowSeconds: 3600}}) ||
		plans[0].Quota == nil || *plans[0].Quota != (traffic.Quota{Limit: 1000, Period: traffic.QuotaDay}) {
		t.Fatalf("the plans: %+v", plans)
	}
	plan := plans[0]
	planRow := `#plans tr[data-id="` + plan.ID + `"]`
	rowHolding(planRow, "gold", "for paying clients", "hourly: 100 / 1 h", "quota: 1,000 a day")
	const planLine = "plan gold: hourly: 100 / 1 h, quota: 1,000 a day"

	// A consumer that takes it, with a policy of its own.
	must(t, "the consumer form", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("create-consumer")),
		chromedp.WaitVisible(chromedp.ID("consumer-form")),
		chromedp.SendKeys(chromedp.ID("c-name"), "ACME"),
		chromedp.SendKeys(chromedp.ID("c-externalId"), "acme-1"),
		chromedp.SendKeys(chromedp.ID("c-description"), "the ACME integration"),
		choose("c-planId", plan.ID),
		chromedp.Click(chromedp.ID("c-add-policy")),
		chromedp.SendKeys(chromedp.ID("c-rateLimits-0-name"), "minute"),
		chromedp.SendKeys(chromedp.ID("c-rateLimits-0-limit"), "50"),
		chromedp.SendKeys(chromedp.ID("c-rateLimits-0-windowSeconds"), "60"),
	))
	labels := text("#consumer-form")
	for _, want := range []string{"Name", "External ID", "Description", "Plan", "Rate limits", "Policy 1", "Limit", "Window (seconds)", "Quota", "Period", "Requests per period"} {
		if !strings.Contains(labels, want) {
			t.Errorf("the consumer form lacks the label %q", want)
		}
	}
	browsertest.Axe(t, ctx, "the consumer form")
	must(t, "create the consumer", chromedp.Do(ctx, chromedp.Click(chromedp.ID("consumer-save")), chromedp.WaitNotVisible(chromedp.ID("consumer-dialog"))))
	waitStatus("Created consumer ACME")
	var consumers []keystore.Consumer
	do(t, http.MethodGet, adminURL+"/webapi/consumers", nil).json(t, &consumers)
	if len(consumers) != 1 || consumers[0].Name != "ACME" || consumers[0].ExternalID == nil || *consumers[0].ExternalID != "acme-1" ||
		consumers[0].Description != "the ACME integration" || consumers[0].PlanID == nil || *consumers[0].PlanID != plan.ID ||
		!slices.Equal(consumers[0].RateLimits, []traffic.RateLimit{{Name: "minute", Limit: 50, WindowSeconds: 60}}) || consumers[0].Quota != nil {
		t.Fatalf("the consumers: %+v", consumers)
	}
	consumer := consumers[0]
	consumerRow := `#consumers tr[data-id="` + consumer.ID + `"]`
	rowHolding(consumerRow, "ACME", "acme-1", "the ACME integration", "minute: 50 / 1 min", planLine, "quota: 1,000 of 1,000 left today, resets ")
	browsertest.Axe(t, ctx, "the Consumers view")

	// A second consumer of the same external ID: refused beside the field.
	must(t, "a second acme-1", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("create-consumer")),
		chromedp.WaitVisible(chromedp.ID("consumer-form")),
		chromedp.SendKeys(chromedp.ID("c-name"), "ACME again"),
		chromedp.SendKeys(chromedp.ID("c-externalId"), "acme-1"),
		chromedp.Click(chromedp.ID("consumer-save")),
		chromedp.WaitVisible(chromedp.ID("ce-externalId")),
	))
	if msg := pg.fieldError("c-externalId", "ce-externalId"); !strings.Contains(msg, "externalId") {
		t.Errorf("beside the external ID: %q", msg)
	}
	browsertest.Axe(t, ctx, "the consumer form with an error")
	must(t, "cancel", chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`#consumer-form .cancel`)), chromedp.WaitNotVisible(chromedp.ID("consumer-dialog"))))
	do(t, http.MethodGet, adminURL+"/webapi/consumers", nil).json(t, &consumers)
	if len(consumers) != 1 {
		t.Fatalf("the refused create made a consumer: %+v", consumers)
	}

	// The key's form offers the consumer and the plan.
	keyRow := `#panel-share tr[data-id="` + key.ID + `"]`
	editKey := func() {
		t.Helper()
		must(t, "the key's form", chromedp.Do(ctx,
			showTab("share"),
			chromedp.WaitVisible(chromedp.CSS(keyRow)),
			chromedp.Click(chromedp.CSS(keyRow+` button.edit`)),
			chromedp.WaitVisible(chromedp.ID("key-form")),
		))
	}
	// Two consumers of one name and no external ID are told apart by id.
	var twins [2]keystore.Consumer
	for i := range twins {
		do(t, http.MethodPost, adminURL+"/webapi/consumers", map[string]any{"name": "Twin"}).json(t, &twins[i])
	}
	editKey()
	got := text("#f-consumerId")
	if !strings.Contains(got, "None") || !strings.Contains(got, "ACME (acme-1)") ||
		!strings.Contains(got, "Twin, id "+twins[0].ID) || !strings.Contains(got, "Twin, id "+twins[1].ID) || strings.Contains(got, "ACME (acme-1), id") {
		t.Errorf("the consumers offered: %q", got)
	}
	for _, c := range twins {
		if r := do(t, http.MethodDelete, adminURL+"/webapi/consumers/"+c.ID, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete a twin: %d %s", r.status, r.body)
		}
	}
	if got := text("#f-planId"); !strings.Contains(got, "None") || !strings.Contains(got, "gold") {
		t.Errorf("the plans offered: %q", got)
	}
	if c, p := value("#f-consumerId"), value("#f-planId"); c != "" || p != "" {
		t.Errorf("a key without consumer or plan shows %q and %q", c, p)
	}
	must(t, "choose them", chromedp.Do(ctx, choose("f-consumerId", consumer.ID), choose("f-planId", plan.ID)))
	browsertest.Axe(t, ctx, "the key form with a consumer and a plan")
	must(t, "save the key", chromedp.Do(ctx, chromedp.Click(chromedp.ID("key-save")), chromedp.WaitNotVisible(chromedp.ID("key-dialog"))))
	waitStatus("Saved key acme key")
	var k keystore.Key
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+key.ID, nil).json(t, &k)
	if k.ConsumerID == nil || *k.ConsumerID != consumer.ID || k.PlanID == nil || *k.PlanID != plan.ID {
		t.Fatalf("the key's consumer %v and plan %v", k.ConsumerID, k.PlanID)
	}
	rowHolding(keyRow, planLine, "consumer ACME (acme-1)", "quota: 1,000 of 1,000 left today")

	// Three requests of the key, counted under the consumer, in one
	// hour's bar of its chart.
	clearOfWindowEdge(time.Hour, time.Minute)
	for i := range 3 {
		if r := use(); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, r.status, r.body)
		}
	}
	var used keystore.Consumer
	do(t, http.MethodGet, adminURL+"/webapi/consumers/"+consumer.ID, nil).json(t, &used)
	if used.QuotaUsed == nil || *used.QuotaUsed != 3 || used.QuotaResetsAt == nil || used.KeyCount != 1 {
		t.Fatalf("the consumer after three requests: used %v, resets %v, %d keys", used.QuotaUsed, used.QuotaResetsAt, used.KeyCount)
	}
	quotaLine := "quota: 997 of 1,000 left today, resets " + used.QuotaResetsAt.UTC().Format("2006-01-02 15:04") + " UTC"
	must(t, "back to the consumers", chromedp.Do(ctx, showTab("consumers")))
	rowHolding(consumerRow, quotaLine, "1 key")

	// Neither the consumer, which holds the key, nor the plan, which both
	// take, can be deleted: the problem says why.
	must(t, "delete the consumer", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(consumerRow+` button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
	))
	if q := text("#confirm-dialog"); !strings.Contains(q, "Delete consumer ACME?") {
		t.Errorf("the confirmation says %q", q)
	}
	must(t, "confirm", chromedp.Do(ctx, chromedp.Click(chromedp.ID("confirm-yes"))))
	waitStatus("Could not delete consumer ACME: the consumer still holds keys")
	if bad, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("status").classList.contains("bad")`)); err != nil || !bad {
		t.Errorf("the refusal is not shown as an error (%v)", err)
	}
	browsertest.Axe(t, ctx, "a refused delete")
	if r := do(t, http.MethodGet, adminURL+"/webapi/consumers/"+consumer.ID, nil); r.status != http.StatusOK {
		t.Fatalf("the consumer after the refused delete: %d", r.status)
	}
	must(t, "delete the plan", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(planRow+` button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
		chromedp.Click(chromedp.ID("confirm-yes")),
	))
	waitStatus("Could not delete plan gold: the plan is assigned to keys or consumers")

	// The consumer's details: its keys, its limits, and its requests as
	// bars.
	must(t, "the consumer's details", chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(consumerRow+` button.details`)),
		chromedp.WaitVisible(chromedp.ID("usage-dialog")),
		chromedp.WaitVisible(chromedp.CSS(`#usage-keys tr[data-id="`+key.ID+`"]`)),
	))
	if got := text("#usage-title"); got != "Consumer ACME" {
		t.Errorf("the details' title %q", got)
	}
	if keys := text("#usage-keys"); !strings.Contains(keys, "acme key") || !strings.Contains(keys, "share") || !strings.Contains(keys, key.TokenPrefix+"…") {
		t.Errorf("the consumer's keys: %q", keys)
	}
	if limits := text("#usage-limits"); !strings.Contains(limits, "minute: 50 / 1 min") || !strings.Contains(limits, planLine) || !strings.Contains(limits, quotaLine) {
		t.Errorf("the consumer's limits: %q", limits)
	}
	if got, want := pg.usageSummary("in the last 30 days"), "3 requests in the last 30 days, none refused."; got != want {
		t.Errorf("the consumer's usage by day says %q, want %q", got, want)
	}
	if c := pg.readChart(); c.OK != 1 || c.Refused != 0 || c.Rows < 30 || c.Role != "img" || !strings.Contains(c.Title, "consumer ACME") || c.TableOK != 3 {
		t.Errorf("the consumer's chart by day: %+v", c)
	}
	must(t, "by hour", chromedp.Do(ctx, chromedp.Click(chromedp.ID("usage-hour"))))
	if got, want := pg.usageSummary("in the last 48 hours"), "3 requests in the last 48 hours, none refused."; got != want {
		t.Errorf("the consumer's usage by hour says %q, want %q", got, want)
	}
	if c := pg.readChart(); c.OK != 1 || c.Rows < 48 || c.TableOK != 3 {
		t.Errorf("the consumer's chart by hour: %+v", c)
	}
	browsertest.Axe(t, ctx, "the consumer's details")
	must(t, "close the details", chromedp.Do(ctx, chromedp.Click(chromedp.ID("usage-done")), chromedp.WaitNotVisible(chromedp.ID("usage-dialog"))))
	// A key's usage in the same dialog shows no keys.
	must(t, "a key's usage", chromedp.Do(ctx,
		showTab("share"),
		chromedp.Click(chromedp.CSS(keyRow+` button.usage`)),
		chromedp.WaitVisible(chromedp.ID("usage-dialog")),
	))
	pg.usageSummary("3 requests in the last 30 days")
	if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("usage-keys").hidden`)); err != nil || !hidden {
		t.Errorf("a key's usage shows a list of keys (%v)", err)
	}
	must(t, "close the key's usage", chromedp.Do(ctx, chromedp.Click(chromedp.ID("usage-done")), chromedp.WaitNotVisible(chromedp.ID("usage-dialog"))))

	// A name and an external ID of their greatest length, without a
	// space, wrap: the row's buttons stay in view, no sideways scroll.
	var long keystore.Consumer
	do(t, http.MethodPost, adminURL+"/webapi/consumers", map[string]any{"name": strings.Repeat("W", 100), "externalId": strings.Repeat("x", 255)}).json(t, &long)
	longRow := `#consumers tr[data-id="` + long.ID + `"]`
	must(t, "the long-named consumer", chromedp.Do(ctx, chromedp.Reload(), showTab("consumers"), chromedp.WaitVisible(chromedp.CSS(longRow))))
	fit, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => {
		const wrap = document.querySelector("#consumers .table-wrap"), del = document.querySelector('`+longRow+` button.delete');
		return [wrap.scrollWidth, wrap.clientWidth, del.getBoundingClientRect().right, wrap.getBoundingClientRect().right];
	})()`))
	must(t, "measure the long row", err)
	if fit[0] > fit[1] || fit[2] > fit[3] {
		t.Errorf("a long name widens the consumers' table to %v px in %v px, its Delete button ends at %v px of %v", fit[0], fit[1], fit[2], fit[3])
	}
	if r := do(t, http.MethodDelete, adminURL+"/webapi/consumers/"+long.ID, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete the long-named consumer: %d %s", r.status, r.body)
	}

	// On a phone, in the dark: the view and the details fit the screen.
	phone := browsertest.New(t, browsertest.WindowSize(390, 844), browsertest.Mobile(), browsertest.DarkScheme())
	must(t, "log in on the phone", browsertest.BasicAuth(phone, pageUser, pagePassword))
	must(t, "the Consumers view on the phone", chromedp.Do(phone,
		chromedp.Navigate(siteURL+"/admin/#consumers"),
		chromedp.WaitVisible(chromedp.CSS(consumerRow)),
		chromedp.WaitVisible(chromedp.CSS(planRow)),
	))
	layout, err := chromedp.Run(phone, chromedp.Evaluate[[]float64](`[document.documentElement.scrollWidth, window.innerWidth]`))
	must(t, "measure", err)
	if layout[0] > layout[1] {
		t.Errorf("on the phone the Consumers view is %v px wide in a %v px window", layout[0], layout[1])
	}
	browsertest.Axe(t, phone, "the Consumers view on a phone, dark")
	must(t, "the details on the phone", chromedp.Do(phone,
		chromedp.Click(chromedp.CSS(consumerRow+` button.details`)),
		chromedp.WaitVisible(chromedp.CSS(`#usage-keys tr[data-id="`+key.ID+`"]`)),
	))
	_, err = chromedp.Run(phone, chromedp.Poll[bool](`document.querySelector("#usage-chart svg rect.bar-ok") !== null`, chromedp.WithPollingTimeout(testwait.Generous)))
	must(t, "the chart on the phone", err)
	layout, err = chromedp.Run(phone, chromedp.Evaluate[[]float64](`(() => { const d = document.getElementById("usage-dialog");
		return [d.scrollWidth, d.clientWidth, document.querySelector("#usage-chart svg").getBoundingClientRect().width]; })()`))
	must(t, "measure the details", err)
	if layout[0] > layout[1] || layout[2] > layout[1] {
		t.Errorf("on the phone the details are %v px wide in %v px, the chart %v px", layout[0], layout[1], layout[2])
	}
	browsertest.Axe(t, phone, "the consumer's details on a phone, dark")

	// The address's hash picks the tab, on an open page too.
	for _, hash := range []string{"share", "consumers"} {
		_, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash = "#`+hash+`"`))
		must(t, "set the hash to #"+hash, err)
		_, err = chromedp.Run(ctx, chromedp.Poll[bool](`!document.getElementById("panel-`+hash+`").hidden`, chromedp.WithPollingTimeout(testwait.Generous)))
		must(t, "the hash picks the tab "+hash, err)
	}
	must(t, "one panel shown", chromedp.Do(ctx, chromedp.WaitNotVisible(chromedp.ID("panel-share"))))

	// Edit: another name, no plan, a monthly quota of its own; the rest
	// stays.
	must(t, "edit the consumer", chromedp.Do(ctx,
		showTab("consumers"),
		chromedp.WaitVisible(chromedp.CSS(consumerRow)),
		chromedp.Click(chromedp.CSS(consumerRow+` button.edit`)),
		chromedp.WaitVisible(chromedp.ID("consumer-form")),
	))
	for sel, want := range map[string]string{"#c-name": "ACME", "#c-externalId": "acme-1", "#c-description": "the ACME integration", "#c-planId": plan.ID,
		"#c-rateLimits-0-name": "minute", "#c-rateLimits-0-limit": "50", "#c-rateLimits-0-windowSeconds": "60", "#c-quota-period": ""} {
		if got := value(sel); got != want {
			t.Errorf("the edit form shows %s %q, want %q", sel, got, want)
		}
	}
	// A quota of its own beside its plan's: the error stands by the Quota
	// group, and focus goes to the group's first control (a fieldset
	// takes none), not to the page.
	must(t, "a quota beside the plan's", chromedp.Do(ctx,
		choose("c-quota-period", "day"),
		chromedp.WaitEnabled(chromedp.ID("c-quota-limit")),
		chromedp.SetValue(chromedp.ID("c-quota-limit"), "5"),
		chromedp.Click(chromedp.ID("consumer-save")),
		chromedp.WaitVisible(chromedp.CSS(`#consumer-form fieldset[aria-invalid="true"]`)),
	))
	if in, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const f = document.activeElement.closest("fieldset");
		return !!f && f.getAttribute("aria-invalid") === "true" && f.contains(document.getElementById("c-quota-period"));
	})()`)); err != nil || !in {
		t.Errorf("after the quota's error, focus is not in the Quota group (%v)", err)
	}
	must(t, "change it", chromedp.Do(ctx,
		chromedp.SetValue(chromedp.ID("c-quota-limit"), ""),
		chromedp.SetValue(chromedp.ID("c-name"), "ACME Corp"),
		choose("c-planId", ""),
		choose("c-quota-period", "month"),
		chromedp.WaitEnabled(chromedp.ID("c-quota-limit")),
		chromedp.SendKeys(chromedp.ID("c-quota-limit"), "5000"),
		chromedp.Click(chromedp.ID("consumer-save")),
		chromedp.WaitNotVisible(chromedp.ID("consumer-dialog")),
	))
	waitStatus("Saved consumer ACME Corp")
	focused := func(what, selector string) {
		t.Helper()
		if on, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.activeElement.matches(`+strconv.Quote(selector)+`)`)); err != nil || !on {
			t.Errorf("after %s, focus is not on %s (%v)", what, selector, err)
		}
	}
	// The row was drawn anew: focus is on its Edit button again.
	focused("saving the consumer", consumerRow+` button.edit`)
	var edited keystore.Consumer
	do(t, http.MethodGet, adminURL+"/webapi/consumers/"+consumer.ID, nil).json(t, &edited)
	if edited.Name != "ACME Corp" || edited.PlanID != nil || edited.Quota == nil || *edited.Quota != (traffic.Quota{Limit: 5000, Period: traffic.QuotaMonth}) ||
		edited.ExternalID == nil || *edited.ExternalID != "acme-1" || edited.Description != "the ACME integration" || len(edited.RateLimits) != 1 {
		t.Errorf("the edited consumer: %+v", edited)
	}
	if row := rowHolding(consumerRow, "ACME Corp", "of 5,000 left this month"); strings.Contains(row, "plan gold") {
		t.Errorf("the consumer's row still names its plan: %q", row)
	}

	// Out of the consumer and the plan, the key leaves both free to go.
	editKey()
	if c, p := value("#f-consumerId"), value("#f-planId"); c != consumer.ID || p != plan.ID {
		t.Errorf("the key's form shows consumer %q and plan %q", c, p)
	}
	must(t, "take the key out", chromedp.Do(ctx,
		choose("f-consumerId", ""),
		choose("f-planId", ""),
		chromedp.Click(chromedp.ID("key-save")),
		chromedp.WaitNotVisible(chromedp.ID("key-dialog")),
	))
	waitStatus("Saved key acme key")
	do(t, http.MethodGet, adminURL+"/webapi/keys/"+key.ID, nil).json(t, &k)
	if k.ConsumerID != nil || k.PlanID != nil {
		t.Fatalf("the key's consumer %v and plan %v, want none", k.ConsumerID, k.PlanID)
	}
	must(t, "delete the consumer", chromedp.Do(ctx,
		showTab("consumers"),
		chromedp.WaitVisible(chromedp.CSS(consumerRow)),
		chromedp.Click(chromedp.CSS(consumerRow+` button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
		chromedp.Click(chromedp.ID("confirm-yes")),
	))
	waitStatus("Deleted consumer ACME Corp")
	// Its row is gone, and no other: focus goes to Create consumer.
	focused("deleting the last consumer", "#create-consumer")
	must(t, "delete the plan", chromedp.Do(ctx,
		chromedp.WaitNotPresent(chromedp.CSS(consumerRow)),
		chromedp.Click(chromedp.CSS(planRow+` button.delete`)),
		chromedp.WaitVisible(chromedp.ID("confirm-yes")),
		chromedp.Click(chromedp.ID("confirm-yes")),
	))
	waitStatus("Deleted plan gold")
	must(t, "none left", chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#consumers .empty`)), chromedp.WaitVisible(chromedp.CSS(`#plans .empty`))))
	for _, path := range []string{"/webapi/consumers/" + consumer.ID, "/webapi/plans/" + plan.ID} {
		if r := do(t, http.MethodGet, adminURL+path, nil); r.status != http.StatusNotFound {
			t.Errorf("%s after its delete: %d", path, r.status)
		}
	}
	if r := use(); r.status != http.StatusOK {
		t.Errorf("the key without consumer and plan: %d %s", r.status, r.body)
	}
}

// jsStrings is ss as a JavaScript array literal.
func jsStrings(ss []string) string {
	b, _ := json.Marshal(ss)
	return string(b)
}

// keysPage drives the Web API Keys page open in ctx for test t.
type keysPage struct {
	t   *testing.T
	ctx context.Context
}

// text is the text of the element sel.
func (p keysPage) text(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS(sel)))
	must(p.t, "read "+sel, err)
	return s
}

// value is the value of the field sel.
func (p keysPage) value(sel string) string {
	p.t.Helper()
	s, err := chromedp.Run(p.ctx, chromedp.Value(chromedp.CSS(sel)))
	must(p.t, "read "+sel, err)
	return s
}

// waitStatus waits until the status line says holding.
func (p keysPage) waitStatus(holding string) {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](
		fmt.Sprintf(`document.getElementById("status").textContent.includes(%q)`, holding), chromedp.WithPollingTimeout(testwait.Generous)))
	if err != nil {
		p.t.Fatalf("the status line %q does not say %q: %v", p.text("#status"), holding, err)
	}
}

// fieldError is the error shown in the box errorID beside the field
// inputID, which must be marked invalid.
func (p keysPage) fieldError(inputID, errorID string) string {
	p.t.Helper()
	inv, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](fmt.Sprintf(`document.getElementById(%q).getAttribute("aria-invalid")`, inputID)))
	if err != nil || inv != "true" {
		p.t.Errorf("%s is not marked invalid: %q %v", inputID, inv, err)
	}
	return p.text("#" + errorID)
}

// usageSummary waits until the usage dialog's chart is drawn and its
// summary says holding, and returns the summary.
func (p keysPage) usageSummary(holding string) string {
	p.t.Helper()
	_, err := chromedp.Run(p.ctx, chromedp.Poll[bool](fmt.Sprintf(`document.getElementById("usage-summary").textContent.includes(%q) &&
		document.querySelector("#usage-chart svg") !== null && !document.getElementById("usage-figure").hasAttribute("aria-busy")`, holding),
		chromedp.WithPollingTimeout(testwait.Generous)))
	if err != nil {
		p.t.Fatalf("the usage summary %q does not say %q: %v", p.text("#usage-summary"), holding, err)
	}
	return p.text("#usage-summary")
}

// usageChart is what the usage dialog's chart and table show: its bars,
// tick labels, title and role, and the table's rows and sums.
type usageChart struct {
	OK, Refused, Rows, Labels int
	Title, Role               string
	TableOK, TableRefused     int
	TableText                 string
}

func (p keysPage) readChart() usageChart {
	p.t.Helper()
	c, err := chromedp.Run(p.ctx, chromedp.Evaluate[usageChart](`(() => {
		const svg = document.querySelector("#usage-chart svg");
		const sum = (col) => Array.from(document.querySelectorAll("#usage-table tbody tr")).reduce((a, r) => a + Number(r.cells[col].textContent.replace(/\D/g, "")), 0);
		return {
			ok: svg.querySelectorAll("rect.bar-ok").length, refused: svg.querySelectorAll("rect.bar-refused").length,
			rows: document.querySelectorAll("#usage-table tbody tr").length, labels: svg.querySelectorAll("text.tick").length,
			title: svg.querySelector("title").textContent, role: svg.getAttribute("role"),
			tableOK: sum(1), tableRefused: sum(2), tableText: document.getElementById("usage-table").textContent,
		};
	})()`))
	must(p.t, "read the chart", err)
	return c
}

// showTab selects the tab of section and waits until its panel is
// loaded (the rows it showed before are replaced by then).
func showTab(section string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := chromedp.Click(chromedp.ID("tab-"+section))(ctx, tg); err != nil {
			return err
		}
		_, err := chromedp.Poll[bool](fmt.Sprintf(`document.getElementById("tab-%[1]s").getAttribute("aria-selected") === "true" &&
			!document.getElementById("panel-%[1]s").hasAttribute("aria-busy")`, section), chromedp.WithPollingTimeout(testwait.Generous))(ctx, tg)
		return err
	})
}

// choose picks value in the select id, as a user's pick does (its
// change event too).
func choose(id, value string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		ok, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q;
			s.dispatchEvent(new Event("change", { bubbles: true })); return s.value === %[2]q; })()`, id, value))(ctx, tg)
		if err == nil && !ok {
			err = fmt.Errorf("%s offers no %q", id, value)
		}
		return err
	})
}

func privileges(k keystore.Key) []string {
	out := make([]string, len(k.Privileges))
	for i, p := range k.Privileges {
		out[i] = string(p)
	}
	return out
}
