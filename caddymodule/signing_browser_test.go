package caddymodule_test

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/keygate/keygate/internal/testkit/browsertest"
	"github.com/keygate/keygate/internal/testkit/mailtest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// signingConfig is a gateway with the contracts API and the signing
// pages on data directory dir and storage (backend.storage's lines).
// With smtpAddr it mails through that SMTP server, else it writes .eml
// files to dir/mail.
func signingConfig(dir, storage, smtpAddr string) string {
	webapi := storage
	if smtpAddr != "" {
		webapi += fmt.Sprintf("\n\t\tsmtp %s {\n\t\t\tfrom \"Contracts <contracts@example.com>\"\n\t\t\ttls none\n\t\t}", smtpAddr)
	}
	return testConfig(dir, webapi, `
	handle /webapi/contracts* {
		webapi_auth contracts
		webapi_contracts
	}
	handle /sign/* {
		webapi_signing
	}
	handle /webapi/documents* {
		webapi_documents
	}
	handle /verify* {
		webapi_verify
	}`)
}

var passwordLine = regexp.MustCompile(`(?m)^\s+(\d{6})\s*$`)

// TestSigningInBrowser signs a contract the way a signer does: headless
// Chromium opens the signing link from the invitation, asks for a
// password, which the test reads from its SMTP server, draws a signature
// on the canvas with the mouse and signs. The contract is then signed,
// with its PDFs downloadable through the API. axe-core checks the page
// in each state: no serious or critical accessibility violation.
func TestSigningInBrowser(t *testing.T) { eachBackend(t, testSigningInBrowser) }

func testSigningInBrowser(t *testing.T, b backend) {
	browsertest.Chromium(t)
	mails := mailtest.Start(t)
	dir, storage := t.TempDir(), b.storage(t)
	serve(t, signingConfig(dir, storage, mails.Addr))

	if r := do(t, http.MethodPost, adminURL+"/webapi/templates", map[string]any{"id": "PAGE-7", "collectionId": "SPACE-7",
		"title": "Service agreement", "body": "The provider shall provide the service.\nThe client shall pay for it."}); r.status != http.StatusCreated {
		t.Fatalf("template: %d %s", r.status, r.body)
	}
	key := createKey(t, map[string]any{"service": "contracts", "name": "browser", "owner": "alice", "privileges": []string{"get", "create"}})
	r := do(t, http.MethodPost, siteURL+"/webapi/contracts", map[string]any{
		"templateId": "PAGE-7", "name": "Browser deal",
		"signers": []map[string]any{{"fullName": "Bea Browser", "accessKind": "email", "email": "bea@example.com", "signerSigningMethods": []string{"draw", "render"}}},
	}, bearer(key.Token)...)
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct {
		ID      string
		Signers []struct{ AccessURL string }
	}
	r.json(t, &created)
	link := created.Signers[0].AccessURL
	testwait.For(t, testwait.Generous, "the invitation", func() bool { return len(mails.To("bea@example.com", "Please sign")) == 1 })
	if inv := mails.To("bea@example.com", "Please sign")[0]; !strings.Contains(inv.Text, link) {
		t.Fatalf("the invitation does not carry the link %s:\n%s", link, inv.Text)
	}

	ctx := browsertest.New(t)

	must(t, "open the link", chromedp.Do(ctx,
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.ID("otp-request")),
	))
	browsertest.Axe(t, ctx, "the signing page")
	must(t, "ask for a password", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("otp-request")),
		chromedp.WaitVisible(chromedp.ID("notice")),
	))
	notice, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("notice")))
	must(t, "read the notice", err)
	if !strings.Contains(notice, "b•••@example.com") {
		t.Errorf("notice %q", notice)
	}
	browsertest.Axe(t, ctx, "the signing page with the password sent")

	var code string
	testwait.For(t, testwait.Generous, "the password e-mail", func() bool {
		ms := mails.To("bea@example.com", "Your one-time password")
		if len(ms) == 0 {
			return false
		}
		if m := passwordLine.FindStringSubmatch(ms[0].Text); m != nil {
			code = m[1]
		}
		return true
	})
	if code == "" {
		t.Fatal("no password in the e-mail")
	}

	must(t, "choose drawing", chromedp.Do(ctx,
		chromedp.Click(chromedp.ID("tab-draw")),
		chromedp.WaitVisible(chromedp.ID("pad")),
		chromedp.ScrollIntoView(chromedp.ID("pad")),
	))
	box, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(() => { const r = document.getElementById("pad").getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()`))
	must(t, "locate the canvas", err)
	left, top, width, height := box[0], box[1], box[2], box[3]
	pressed := func(p *input.DispatchMouseEventParams) {
		p.Button = input.MouseButtonLeft
		p.Buttons = 1
		p.ClickCount = 1
	}
	stroke := []chromedp.Action[chromedp.Void]{chromedp.MouseEvent(chromedp.MousePressed, left+0.1*width, top+0.6*height, pressed)}
	for i := 1; i <= 24; i++ {
		x := left + (0.1+0.8*float64(i)/24)*width
		y := top + (0.6-0.3*float64(i%4)/3)*height
		stroke = append(stroke, chromedp.MouseEvent(chromedp.MouseMoved, x, y, pressed))
	}
	stroke = append(stroke, chromedp.MouseEvent(chromedp.MouseReleased, left+0.9*width, top+0.5*height, pressed))
	must(t, "draw", chromedp.Do(ctx, stroke...))

	must(t, "sign", chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS("#form-draw input.otp"), code),
		chromedp.Click(chromedp.ID("sign-draw")),
		chromedp.WaitVisible(chromedp.ID("state")),
	))
	state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
	must(t, "read the state", err)
	status, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("status")))
	must(t, "read the status", err)
	if !strings.Contains(state, "You signed this contract") || strings.ToLower(status) != "signed" {
		t.Fatalf("after signing the page shows %q, status %q", state, status)
	}
	browsertest.Axe(t, ctx, "the signed contract's page")

	awaitSealed(t, siteURL+"/webapi/contracts/"+created.ID, bearer(key.Token)...)
	r = do(t, http.MethodGet, siteURL+"/webapi/contracts/"+created.ID, nil, bearer(key.Token)...)
	var got struct {
		Status  string
		Signers []struct {
			Decision, DecisionIP, OpenedTimestamp string
		}
		FinalizedPdf, CertificatePdf *struct{ URL, SHA256 string }
	}
	r.json(t, &got)
	if got.Status != "signed" || got.Signers[0].Decision != "signed" || got.Signers[0].DecisionIP == "" || got.Signers[0].OpenedTimestamp == "" {
		t.Fatalf("contract after signing: %s", r.body)
	}
	if got.FinalizedPdf == nil || got.CertificatePdf == nil {
		t.Fatalf("no PDFs listed: %s", r.body)
	}
	for _, a := range []string{got.FinalizedPdf.URL, got.CertificatePdf.URL} {
		pdf := do(t, http.MethodGet, siteURL+a, nil, bearer(key.Token)...)
		if pdf.status != http.StatusOK || pdf.header.Get("Content-Type") != "application/pdf" || !bytes.HasPrefix(pdf.body, []byte("%PDF-")) {
			t.Errorf("GET %s: %d %s", a, pdf.status, pdf.header)
		}
	}
	testwait.For(t, testwait.Generous, "the signed contract e-mail", func() bool {
		ms := mails.To("bea@example.com", "Your signed contract")
		return len(ms) == 1 && len(ms[0].Attachments) == 1
	})
}
