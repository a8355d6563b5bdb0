package signing

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/eventstest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

// eventSigners are two signers who need no password and a third who gets
// one by e-mail.
const eventSigners = `{"templateId":"PAGE-1","name":"Events lease","sequentialSigning":%s,"signers":[
	{"fullName":"Ann Open","accessKind":"url","email":"ann@example.com","otpMethod":"none"},
	{"fullName":"Bob Open","accessKind":"url","phone":"+14155552671","otpMethod":"none"},
	{"fullName":"Cleo Mail","accessKind":"email","email":"cleo@example.com"}],
	"watchers":[{"name":"Wendy","email":"wendy@example.com","notificationKinds":"opened|signed|rejected|completed"}]}`

// eventPersonal is what eventSigners says of people; no event may hold it.
var eventPersonal = []string{"Ann Open", "ann@example.com", "Bob Open", "+14155552671", "Cleo Mail", "cleo@example.com",
	"Wendy", "wendy@example.com", "192.0.2.7", `"signers"`, `"watchers"`, "/sign/"}

// step is one request of a signer and the events it must commit: types
// with the signer they name (-1: none) and the contract status.
type step struct {
	name   string
	signer int
	// do is "open", "head", "otp", "sign", "sign-wrong-otp", "reject"
	// or "expire" (the clock passes the expiry).
	do     string
	status int
	events []stepEvent
}

type stepEvent struct {
	typ    string
	signer int
	status string
}

func TestSigningEvents(t *testing.T) {
	t.Parallel()
	open := func(i int) stepEvent { return stepEvent{events.ContractOpened, i, "sent"} }
	cases := []struct {
		name       string
		sequential bool
		steps      []step
	}{
		{
			name: "every signer signs",
			steps: []step{
				{"first opening", 0, "open", http.StatusOK, []stepEvent{open(0)}},
				{"reopening", 0, "open", http.StatusOK, nil},
				{"HEAD is no opening", 1, "head", http.StatusOK, nil},
				{"another signer opens", 1, "open", http.StatusOK, []stepEvent{open(1)}},
				{"first signature", 0, "sign", http.StatusOK, []stepEvent{{events.ContractSigned, 0, "ongoing"}}},
				{"second decision refused", 0, "sign", http.StatusConflict, nil},
				{"a password asked for", 2, "otp", http.StatusAccepted, []stepEvent{}},
				{"a wrong password", 2, "sign-wrong-otp", http.StatusBadRequest, nil},
				{"second signature", 2, "sign", http.StatusOK, []stepEvent{{events.ContractSigned, 2, "ongoing"}}},
				{"last signature completes", 1, "sign", http.StatusOK, []stepEvent{
					{events.ContractSigned, 1, "signed"}, {events.ContractCompleted, -1, "signed"}}},
				{"opening a completed contract", 2, "open", http.StatusOK, nil},
			},
		},
		{
			name: "a signer rejects",
			steps: []step{
				{"first opening", 1, "open", http.StatusOK, []stepEvent{open(1)}},
				{"signature", 0, "sign", http.StatusOK, []stepEvent{{events.ContractSigned, 0, "ongoing"}}},
				{"rejection", 1, "reject", http.StatusOK, []stepEvent{{events.ContractRejected, 1, "rejected"}}},
				{"decision after the rejection", 2, "otp", http.StatusConflict, nil},
				{"opening a rejected contract", 2, "open", http.StatusOK, nil},
			},
		},
		{
			name:       "sequential signing out of turn",
			sequential: true,
			steps: []step{
				{"second signer opens", 1, "open", http.StatusOK, []stepEvent{open(1)}},
				{"second signer may not decide yet", 1, "sign", http.StatusConflict, nil},
				{"first signer signs without opening", 0, "sign", http.StatusOK, []stepEvent{{events.ContractSigned, 0, "ongoing"}}},
				{"second signer signs", 1, "sign", http.StatusOK, []stepEvent{{events.ContractSigned, 1, "ongoing"}}},
			},
		},
		{
			name: "expired",
			steps: []step{
				{"first opening", 0, "open", http.StatusOK, []stepEvent{open(0)}},
				{"expiry passes", -1, "expire", 0, nil},
				{"opening an expired contract", 1, "open", http.StatusOK, nil},
				{"signing an expired contract", 0, "sign", http.StatusConflict, nil},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, func(t *testing.T, db storage.DB) {
				f := newFixture(t, db)
				seq := "false"
				if tc.sequential {
					seq = "true"
				}
				c := f.create(strings.Replace(eventSigners, "%s", seq, 1))
				signerIDs := make([]string, len(c.Signers))
				for i := range c.Signers {
					signerIDs[i] = c.Signers[i].ID
				}
				if got := eventstest.Types(f.events.Take(t)); !slices.Equal(got, []string{events.ContractCreated}) {
					t.Fatalf("create: events %v", got)
				}
				for _, st := range tc.steps {
					f.clock.Advance(time.Minute)
					now := f.clock.Now()
					if code := f.act(c, st); code != st.status {
						t.Fatalf("%s: status %d, want %d", st.name, code, st.status)
					}
					// A completion's documents are sealed after it: its
					// completed event comes with them.
					f.settle()
					got := f.events.Take(t)
					if len(got) != len(st.events) {
						t.Fatalf("%s: events %v, want %v", st.name, eventstest.Types(got), st.events)
					}
					for i, e := range got {
						w := st.events[i]
						d := eventstest.Data(t, e)
						sid, has := d["signerId"]
						if e.Type != w.typ || d["status"] != w.status || d["id"] != c.ID || e.Owner != "alice" || !e.At.Equal(now) ||
							(w.signer < 0) == has || (w.signer >= 0 && sid != signerIDs[w.signer]) {
							t.Errorf("%s: event %d: %s owner %s at %v data %s; want %+v at %v", st.name, i, e.Type, e.Owner, e.At, e.Data, w, now)
						}
						for _, p := range eventPersonal {
							if strings.Contains(string(e.Data), p) {
								t.Errorf("%s: %s data holds %q", st.name, e.Type, p)
							}
						}
						// The last signature's event shows the documents being
						// sealed; completed, sealed and their PDFs.
						_, pdfs := d["finalizedPdf"]
						wantDocs := map[bool]any{true: contracts.DocumentsSealed, false: contracts.DocumentsBeingSealed}[pdfs]
						if w.status != "signed" {
							wantDocs = nil
						}
						if _, cert := d["certificatePdf"]; pdfs != (w.typ == events.ContractCompleted) || cert != pdfs || d["documentStatus"] != wantDocs {
							t.Errorf("%s: %s data with PDFs %v, document status %v, status %s", st.name, e.Type, pdfs, d["documentStatus"], w.status)
						}
					}
					// The step's last event shows the contract as search
					// does right after it.
					if len(got) > 0 {
						d := eventstest.Data(t, got[len(got)-1])
						delete(d, "signerId")
						if view := f.searchView(c.ID); !reflect.DeepEqual(d, view) {
							t.Errorf("%s: data\n%v\nsearch shows\n%v", st.name, d, view)
						}
					}
				}
			})
		})
	}
}

// act runs st on contract c and returns the reply's status.
func (f *fixture) act(c *created, st step) int {
	f.t.Helper()
	tok := ""
	if st.signer >= 0 {
		tok = c.token(st.signer)
	}
	sign := map[string]string{"decision": "signed", "method": "render", "signature": "My Name"}
	switch st.do {
	case "open":
		return f.page(http.MethodGet, "/sign/"+tok, "", "", "Accept", "application/json").Code
	case "head":
		return f.page(http.MethodHead, "/sign/"+tok, "", "").Code
	case "otp":
		return f.requestOTP(tok).Code
	case "sign-wrong-otp":
		sign["otp"] = "000000"
		if code := f.otpMail("cleo@example.com", 0); code == "000000" {
			sign["otp"] = "111111"
		}
		return f.decide(tok, sign).Code
	case "sign":
		if st.signer == 2 && st.status == http.StatusOK {
			sign["otp"] = f.otpMail("cleo@example.com", 0)
		}
		return f.decide(tok, sign).Code
	case "reject":
		return f.decide(tok, map[string]string{"decision": "rejected", "reason": "Wrong rent"}).Code
	case "expire":
		f.clock.Set(f.clock.Now().Add(contracts.DefaultContractValidity))
		return 0
	}
	f.t.Fatalf("unknown step %q", st.do)
	return 0
}

// searchView is contract id as search returns it.
func (f *fixture) searchView(id string) map[string]any {
	f.t.Helper()
	w := f.apiDo(http.MethodGet, contracts.Prefix+"?placement=any&substring=Events+lease", "")
	var page struct {
		Contracts []map[string]any `json:"contracts"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &page) != nil || len(page.Contracts) != 1 || page.Contracts[0]["id"] != id {
		f.t.Fatalf("search: %d %s", w.Code, w.Body)
	}
	return page.Contracts[0]
}
