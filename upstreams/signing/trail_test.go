package signing

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/pdftest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

// The browsers of the trail tests' signers.
const (
	firefox = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
	safari  = "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1"
)

// createAs creates body through the API as alice's key "Billing sync",
// from 198.51.100.9 with the client's own user agent.
func (f *fixture) createAs(body string) *created {
	f.t.Helper()
	r := httptest.NewRequest(http.MethodPost, contracts.Prefix, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("User-Agent", "billing-sync/2.1\x00\n(bot)")
	r.RemoteAddr = "198.51.100.9:5000"
	r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "0b6f7d1e-1111-4222-8333-944455556666",
		KeyName: "Billing sync", Owner: "alice", Service: access.ServiceContracts}))
	w := httptest.NewRecorder()
	f.api.ServeHTTP(w, r)
	if w.Code != http.StatusCreated {
		f.t.Fatalf("create: %d %s", w.Code, w.Body)
	}
	return decodeCreated(f.t, w.Body.Bytes())
}

// certificateText is the pdftotext of contract id's certificate of
// completion, each run of spaces and line breaks as one space (a long
// line wraps where the page ends), after checking that the certificate's
// seal holds.
func (f *fixture) certificateText(id string) string {
	f.t.Helper()
	c := f.sealed(id)
	a, ok := c["certificatePdf"].(map[string]any)
	if !ok {
		f.t.Fatalf("contract %s has no certificate: %v", id, c)
	}
	doc := f.download(a)
	if out, ok := pdftest.SealValid(f.t, doc); !ok {
		f.t.Errorf("the certificate's seal:\n%s", out)
	}
	return words(pdftest.Text(f.t, doc))
}

// words is s with each run of white space as one space.
func words(s string) string { return strings.Join(strings.Fields(s), " ") }

// inOrder checks that text (as words gives it) holds each of want (line
// breaks as spaces), one after the other.
func inOrder(t *testing.T, text string, want []string) {
	t.Helper()
	rest := text
	for _, w := range want {
		w = words(w)
		i := strings.Index(rest, w)
		if i < 0 {
			if strings.Contains(text, w) {
				t.Errorf("certificate has %q, but before the steps it should follow", w)
			} else {
				t.Errorf("certificate lacks %q", w)
			}
			continue
		}
		rest = rest[i+len(w):]
	}
	if t.Failed() {
		t.Logf("certificate:\n%s", text)
	}
}

// TestCertificateTrail signs a contract in order: Ann by e-mail with a
// one-time password by e-mail (one wrong try first), Uma by a link the
// API client handed over, Cleo by an e-mail invitation sent when Uma
// signed. Its certificate of completion, read with pdftotext, lists
// every step with its time, address and browser, in order.
func TestCertificateTrail(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.createAs(`{"templateId":"PAGE-1","name":"Trail lease","sequentialSigning":true,"signers":[
			{"fullName":"Ann Email","accessKind":"email","email":"ann@example.com","otpMethod":"email"},
			{"fullName":"Uma Url","accessKind":"url","otpMethod":"none"},
			{"fullName":"Cleo Late","accessKind":"email","email":"cleo@example.com","otpMethod":"none"}]}`)
		ann, uma, cleo := c.token(0), c.token(1), c.token(2)

		f.clock.Advance(time.Minute) // 10:16:00
		f.page(http.MethodGet, "/sign/"+ann, "", "", "User-Agent", firefox)
		f.page(http.MethodGet, "/sign/"+ann, "", "", "User-Agent", safari) // a reopening: not a step
		f.clock.Advance(5 * time.Second)                                   // 10:16:05
		if w := f.page(http.MethodPost, "/sign/"+ann+"/otp", "", "", "User-Agent", firefox); w.Code != http.StatusAccepted {
			t.Fatalf("otp: %d %s", w.Code, w.Body)
		}
		code := f.otpMail("ann@example.com", 0)
		wrong := "000000"
		if code == wrong {
			wrong = "111111"
		}
		f.clock.Advance(20 * time.Second) // 10:16:25
		sign := map[string]string{"decision": "signed", "method": "render", "signature": "Ann Email", "otp": wrong}
		decodeProblem(t, f.decide(ann, sign), http.StatusBadRequest, "invalid_request")
		f.clock.Advance(10 * time.Second) // 10:16:35
		sign["otp"] = code
		if w := f.decide(ann, sign); w.Code != http.StatusOK {
			t.Fatalf("ann signs: %d %s", w.Code, w.Body)
		}

		f.clock.Advance(time.Hour) // 11:16:35
		f.page(http.MethodGet, "/sign/"+uma, "", "", "User-Agent", safari)
		f.clock.Advance(time.Minute) // 11:17:35
		umaSigns := map[string]string{"decision": "signed", "method": "draw", "signature": "data:image/png;base64," + drawing(t)}
		raw, _ := json.Marshal(umaSigns)
		if w := f.page(http.MethodPost, "/sign/"+uma+"/decision", "application/json", string(raw), "User-Agent", safari); w.Code != http.StatusOK {
			t.Fatalf("uma signs: %d %s", w.Code, w.Body)
		}

		f.clock.Advance(24 * time.Hour) // 23 November, 11:17:35
		f.page(http.MethodGet, "/sign/"+cleo, "", "")
		if w := f.decide(cleo, map[string]string{"decision": "signed", "method": "render", "signature": "Cleo Late"}); w.Code != http.StatusOK {
			t.Fatalf("cleo signs: %d %s", w.Code, w.Body)
		}

		text := f.certificateText(c.ID)
		const api = "IP address 198.51.100.9 · user agent “billing-sync/2.1 (bot)”"
		const annFrom = "IP address 192.0.2.7 · user agent “" + firefox + "”"
		// Too long for one line with the address: a line each.
		const umaFrom = "IP address 192.0.2.7\nuser agent “" + safari + "”"
		inOrder(t, text, []string{
			"Contract\n", "Trail lease",
			"22 November 2026, 10:15:00 UTC\nContract created through the API by alice, with the API key “Billing sync” (0b6f7d1e-1111-4222-8333-944455556666)\n" + api,
			"23 November 2026, 11:17:35 UTC\nContract completed: every signer has signed\nIP address 192.0.2.7\n",

			"Signer 1 of 3", "Ann Email", "ann@example.com",
			"22 November 2026, 10:15:00 UTC\nInvitation queued for delivery by e-mail to a•••@example.com\n" + api,
			"22 November 2026, 10:16:00 UTC\nOpened the signing page\n" + annFrom,
			"22 November 2026, 10:16:05 UTC\nOne-time password queued for delivery by e-mail to a•••@example.com\n" + annFrom,
			"22 November 2026, 10:16:25 UTC\nWrong one-time password entered (4 tries left)\nIP address 192.0.2.7\n",
			"22 November 2026, 10:16:35 UTC\nOne-time password accepted\nIP address 192.0.2.7\n",
			"22 November 2026, 10:16:35 UTC\nSigned: typed name\nIP address 192.0.2.7\n",

			"Signer 2 of 3", "Uma Url",
			"22 November 2026, 10:15:00 UTC\nSigning link given to the API client that created the contract, which hands it to the signer (access by link, no e-mail)\n" + api,
			"22 November 2026, 11:16:35 UTC\nOpened the signing page\n" + umaFrom,
			"22 November 2026, 11:17:35 UTC\nSigned: signature drawn on the signing page\n" + umaFrom,

			// Cleo's turn began with Uma's signature: her invitation
			// came from Uma's request.
			"Signer 3 of 3", "Cleo Late",
			"22 November 2026, 11:17:35 UTC\nInvitation queued for delivery by e-mail to c•••@example.com\n" + umaFrom,
			"23 November 2026, 11:17:35 UTC\nOpened the signing page\nIP address 192.0.2.7\n",
			"23 November 2026, 11:17:35 UTC\nSigned: typed name\nIP address 192.0.2.7\n",
		})
		for _, never := range []string{"Safari/604.1” Opened the signing page", "(recorded before the event trail)", "\x00"} {
			if strings.Contains(text, never) {
				t.Errorf("certificate holds %q", never)
			}
		}
		if n := strings.Count(text, "Opened the signing page"); n != 3 {
			t.Errorf("%d openings listed, want one per signer", n)
		}

		// The trail goes with the contract.
		if w := f.apiDo(http.MethodDelete, contracts.Prefix+"/"+c.ID, ""); w.Code != http.StatusNoContent {
			t.Fatalf("delete: %d %s", w.Code, w.Body)
		}
		if n := len(f.trail(c.ID)); n != 0 {
			t.Errorf("a deleted contract's trail has %d events", n)
		}
	})
}

// TestCertificateOfOlderContract completes a contract whose first steps
// were taken before trails were kept (its trail is emptied midway, as an
// upgrade finds it): the certificate still lists them, from the record,
// marked as such, then the steps recorded since.
func TestCertificateOfOlderContract(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		c := f.create(`{"templateId":"PAGE-1","name":"Old lease","signers":[
			{"fullName":"Ann Early","accessKind":"email","email":"ann@example.com","otpMethod":"none"},
			{"fullName":"Bob After","accessKind":"email","email":"bob@example.com","otpMethod":"none"}]}`)
		f.clock.Advance(time.Minute)
		f.page(http.MethodGet, "/sign/"+c.token(0), "", "")
		if w := f.decide(c.token(0), map[string]string{"decision": "signed", "method": "render", "signature": "Ann Early"}); w.Code != http.StatusOK {
			t.Fatalf("ann signs: %d %s", w.Code, w.Body)
		}
		if err := f.db.Update(context.Background(), func(tx storage.Tx) error { return f.backend.DeleteTrail(tx, c.ID) }); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Minute)
		f.page(http.MethodGet, "/sign/"+c.token(1), "", "", "User-Agent", firefox)
		if w := f.decide(c.token(1), map[string]string{"decision": "signed", "method": "render", "signature": "Bob After"}); w.Code != http.StatusOK {
			t.Fatalf("bob signs: %d %s", w.Code, w.Body)
		}
		inOrder(t, f.certificateText(c.ID), []string{
			"22 November 2026, 10:15:00 UTC\nContract created through the API by alice (recorded before the event trail)\n",
			"22 November 2026, 10:17:00 UTC\nContract completed",
			"Ann Early",
			"22 November 2026, 10:16:00 UTC\nOpened the signing page (recorded before the event trail)\n",
			"22 November 2026, 10:16:00 UTC\nSigned (recorded before the event trail)\nIP address 192.0.2.7\n",
			"Bob After",
			"22 November 2026, 10:17:00 UTC\nOpened the signing page\nIP address 192.0.2.7 · user agent “" + firefox + "”",
			"22 November 2026, 10:17:00 UTC\nSigned: typed name\n",
		})
	})
}

// TestCertificateClientText: what a client chose (its user agent, a
// signer's name and e-mail address, the key's name and owner) comes out
// of pdftotext with the certificate's quotes and separators escaped, so
// that none of it reads as the gateway's own words.
func TestCertificateClientText(t *testing.T) {
	t.Parallel()
	planted := "Mozilla/5.0” · identity verified with passport no. X123 · IP address 10.0.0.1 “"
	tests := []struct {
		name                            string
		owner, keyName, fullName, email string
		userAgent                       string // of the create and of the signer's requests
		want                            []string
	}{
		{name: "statements planted in a user agent", owner: "alice", keyName: "Billing sync", fullName: "Ann Email", email: "ann@example.com",
			userAgent: planted, want: []string{
				"Contract created through the API by alice, with the API key “Billing sync”",
				`Opened the signing page IP address 192.0.2.7 · user agent “Mozilla/5.0\u201D \u00B7 identity verified with passport no. X123 \u00B7 IP address 10.0.0.1 \u201C”`,
			}},
		{name: "a signer's name and e-mail address", owner: "alice", keyName: "Billing sync", fullName: `Eve” · verified “Bob "B"`,
			email: "“eve”·@example.com", userAgent: firefox, want: []string{
				`Full name Eve\u201D \u00B7 verified \u201CBob \u0022B\u0022 E-mail \u201Ceve\u201D\u00B7@example.com`,
				`Invitation queued for delivery by e-mail to \u201C•••@example.com IP address 198.51.100.9 · user agent “` + firefox + "”",
			}},
		{name: "the key's name and owner", owner: `alice "root"`, keyName: "Sync” · verified “", fullName: "Ann Email", email: "ann@example.com",
			userAgent: "curl/8.5.0", want: []string{
				`Contract created through the API by alice \u0022root\u0022, with the API key “Sync\u201D \u00B7 verified \u201C” (0b6f7d1e-1111-4222-8333-944455556666)`,
			}},
	}
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixture(t, db)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				signer, _ := json.Marshal(map[string]string{"fullName": tt.fullName, "accessKind": "email", "email": tt.email, "otpMethod": "none"})
				r := httptest.NewRequest(http.MethodPost, contracts.Prefix, strings.NewReader(`{"templateId":"PAGE-1","name":"Lease","signers":[`+string(signer)+`]}`))
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("User-Agent", tt.userAgent)
				r.RemoteAddr = "198.51.100.9:5000"
				r = r.WithContext(access.WithIdentity(r.Context(), &access.Identity{KeyID: "0b6f7d1e-1111-4222-8333-944455556666",
					KeyName: tt.keyName, Owner: tt.owner, Service: access.ServiceContracts}))
				w := httptest.NewRecorder()
				f.api.ServeHTTP(w, r)
				if w.Code != http.StatusCreated {
					t.Fatalf("create: %d %s", w.Code, w.Body)
				}
				c := decodeCreated(t, w.Body.Bytes())
				f.page(http.MethodGet, "/sign/"+c.token(0), "", "", "User-Agent", tt.userAgent)
				raw, _ := json.Marshal(map[string]string{"decision": "signed", "method": "render", "signature": "Signer"})
				if w := f.page(http.MethodPost, "/sign/"+c.token(0)+"/decision", "application/json", string(raw), "User-Agent", tt.userAgent); w.Code != http.StatusOK {
					t.Fatalf("sign: %d %s", w.Code, w.Body)
				}
				text := f.certificateText(c.ID)
				for _, want := range tt.want {
					if !strings.Contains(text, want) {
						t.Errorf("certificate lacks %q:\n%s", want, text)
					}
				}
				for _, v := range []string{tt.owner, tt.keyName, tt.fullName, tt.email, tt.userAgent} {
					if strings.ContainsAny(v, "“”\"·") && strings.Contains(text, words(v)) {
						t.Errorf("certificate holds %q as the client sent it", v)
					}
				}
			})
		}
	})
}

// trail reads contract id's trail.
func (f *fixture) trail(id string) []TrailEvent {
	f.t.Helper()
	var out []TrailEvent
	if err := f.db.View(context.Background(), func(tx storage.Tx) (err error) { out, err = f.backend.Trail(tx, id); return err }); err != nil {
		f.t.Fatal(err)
	}
	return out
}
