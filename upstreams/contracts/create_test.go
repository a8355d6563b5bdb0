package contracts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/token"

	"github.com/google/uuid"
	"go.etcd.io/bbolt"
)

const fullBody = `{
	"templateId": "PAGE-1",
	"name": "Flat 3B lease",
	"sequentialSigning": true,
	"signers": [
		{"fullName": "Ann Tenant", "accessKind": "email", "email": "ann@example.com"},
		{"fullName": "Lou Landlord", "accessKind": "url", "phone": "+41446681800",
		 "signerSigningMethods": ["draw"], "appendSignatureMacro": true, "receivesCompletedContract": false},
		{"fullName": "Wit Ness", "accessKind": "url"}
	],
	"watchers": [{"name": "Agency", "email": "desk@agency.example", "notificationKinds": "created|completed"}]
}`

func TestCreateReply(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		w := f.do(alice, http.MethodPost, Prefix, fullBody)
		if w.Code != http.StatusCreated {
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		got := decodeObject(t, w)
		id := got["id"].(string)
		if u, err := uuid.Parse(id); err != nil || u.String() != id {
			t.Fatalf("id %q is not a canonical UUID", id)
		}
		if loc := w.Header().Get("Location"); loc != "/webapi/contracts/"+id {
			t.Errorf("Location %q", loc)
		}
		if ct := w.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		want := map[string]any{
			"templateId":          "PAGE-1",
			"collectionId":        "SPACE-A",
			"name":                "Flat 3B lease",
			"createdById":         alice,
			"creationTimestamp":   "2026-11-22T10:15:00.000Z",
			"expirationTimestamp": "2026-11-29T10:15:00.000Z",
			"sequentialSigning":   true,
			"status":              "sent",
			"watchers": []any{map[string]any{
				"name": "Agency", "email": "desk@agency.example", "notificationKinds": "created|completed"}},
		}
		for k, v := range want {
			if !reflect.DeepEqual(got[k], v) {
				t.Errorf("%s = %#v, want %#v", k, got[k], v)
			}
		}
		if _, ok := got["archivalTimestamp"]; ok {
			t.Error("archivalTimestamp present on a stacked contract")
		}
		signers := got["signers"].([]any)
		if len(signers) != 3 {
			t.Fatalf("%d signers", len(signers))
		}
		wantSigners := []map[string]any{
			{"fullName": "Ann Tenant", "accessKind": "email", "email": "ann@example.com", "otpMethod": "email",
				"signerSigningMethods": []any{"upload", "render", "draw"}, "appendSignatureMacro": false, "receivesCompletedContract": true},
			{"fullName": "Lou Landlord", "accessKind": "url", "phone": "+41446681800", "otpMethod": "sms",
				"signerSigningMethods": []any{"draw"}, "appendSignatureMacro": true, "receivesCompletedContract": false},
			{"fullName": "Wit Ness", "accessKind": "url", "otpMethod": "none",
				"signerSigningMethods": []any{"upload", "render", "draw"}, "appendSignatureMacro": false, "receivesCompletedContract": true},
		}
		seenIDs := map[string]bool{}
		for i, s := range signers {
			sg := s.(map[string]any)
			sid, _ := sg["id"].(string)
			if _, err := uuid.Parse(sid); err != nil || seenIDs[sid] {
				t.Errorf("signer %d id %q", i, sid)
			}
			seenIDs[sid] = true
			url, _ := sg["accessUrl"].(string)
			token := strings.TrimPrefix(url, baseURL+"/sign/")
			if len(token) != 43 || token == url {
				t.Errorf("signer %d accessUrl %q", i, url)
			}
			for _, absent := range []string{"openedTimestamp", "decision", "decisionTimestamp", "decisionIp"} {
				if _, ok := sg[absent]; ok {
					t.Errorf("signer %d has %s", i, absent)
				}
			}
			delete(sg, "id")
			delete(sg, "accessUrl")
			if !reflect.DeepEqual(sg, wantSigners[i]) {
				t.Errorf("signer %d = %#v\nwant %#v", i, sg, wantSigners[i])
			}
			// The link leads back to this signer; the store keeps only the
			// hash and the sealed token, never the token itself.
			c, idx, err := f.store.BySigningToken(ctx(), token)
			if err != nil || c.ID != id || idx != i {
				t.Errorf("signer %d token lookup: %v, %d, %v", i, c, idx, err)
			}
			assertNotStored(t, f, token)
		}

		// Stored state: GET shows the same object.
		g := f.do(alice, http.MethodGet, "/webapi/contracts/"+id, "")
		if g.Code != http.StatusOK {
			t.Fatalf("get: %d", g.Code)
		}
		var created, fetched map[string]any
		json.Unmarshal(w.Body.Bytes(), &created)
		json.Unmarshal(g.Body.Bytes(), &fetched)
		if !reflect.DeepEqual(created, fetched) {
			t.Errorf("get differs from create:\n%s\n%s", w.Body, g.Body)
		}
		doc, err := f.store.Document(ctx(), mustGet(t, f, id))
		if err != nil || doc.Title != "Lease" || doc.Body != "The tenant shall pay." || doc.Markup != "" {
			t.Errorf("document %+v %v", doc, err)
		}
	})
}

// assertNotStored fails if any bucket holds s in clear.
func assertNotStored(t *testing.T, f *fixture, s string) {
	t.Helper()
	if f.bolt == nil {
		assertNotStoredPG(t, f, s)
		return
	}
	f.bolt.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if bytes.Contains(k, []byte(s)) || bytes.Contains(v, []byte(s)) {
					t.Errorf("bucket %s holds the token in clear", name)
				}
				return nil
			})
		})
	})
}

func mustGet(t *testing.T, f *fixture, id string) *Contract {
	t.Helper()
	c, err := f.store.Get(ctx(), id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateOTPDefault(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		cases := []struct {
			name, signer, want string
		}{
			{"phone wins over email", `"accessKind":"email","email":"a@example.com","phone":"+447400123456"`, "sms"},
			{"phone alone", `"accessKind":"url","phone":"+447400123456"`, "sms"},
			{"email alone", `"accessKind":"url","email":"a@example.com"`, "email"},
			{"neither", `"accessKind":"url"`, "none"},
			{"explicit none with phone", `"accessKind":"url","phone":"+447400123456","otpMethod":"none"`, "none"},
			{"explicit email with phone", `"accessKind":"email","email":"a@example.com","phone":"+447400123456","otpMethod":"email"`, "email"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				got := f.create(alice, `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S",`+tc.signer+`}]}`)
				if m := got["signers"].([]any)[0].(map[string]any)["otpMethod"]; m != tc.want {
					t.Errorf("otpMethod %v, want %s", m, tc.want)
				}
			})
		}
	})
}

func TestCreateExplicitExpiration(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		cases := []struct {
			value string
			ok    bool
			want  string
		}{
			{"2026-11-22T10:15:00.001Z", true, "2026-11-22T10:15:00.001Z"},
			{"2026-11-22T11:15:00+01:00", false, ""},                   // the same instant as now: not in the future
			{"2027-11-22T10:15:00Z", true, "2027-11-22T10:15:00.000Z"}, // exactly 365 days
			{"2027-11-22T10:15:00.001Z", false, ""},
			{"2026-12-01T12:00:00.123456+02:00", true, "2026-12-01T10:00:00.123Z"},
			{"2026-11-21T10:15:00Z", false, ""},
			{"next tuesday", false, ""},
			{"2026-12-01", false, ""},
		}
		for _, tc := range cases {
			t.Run(tc.value, func(t *testing.T) {
				body := fmt.Sprintf(`{"templateId":"PAGE-1","name":"N","expirationTimestamp":%q,"signers":[{"fullName":"S","accessKind":"url"}]}`, tc.value)
				w := f.do(alice, http.MethodPost, Prefix, body)
				if !tc.ok {
					d := decodeProblem(t, w, http.StatusBadRequest, "invalid_request")
					if got := fieldCodes(d); !reflect.DeepEqual(got, []string{"expirationTimestamp=invalid"}) {
						t.Errorf("errors %v", got)
					}
					return
				}
				if w.Code != http.StatusCreated {
					t.Fatalf("status %d: %s", w.Code, w.Body)
				}
				if got := decodeObject(t, w)["expirationTimestamp"]; got != tc.want {
					t.Errorf("expirationTimestamp %v, want %s", got, tc.want)
				}
			})
		}
	})
}

func TestCreateDefaultValidityFromConfig(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db, func(c *Config) { c.ContractValidity = 48 * time.Hour })
		got := f.create(alice, `{"templateId":"PAGE-2","name":"N","signers":[{"fullName":"S","accessKind":"url"}]}`)
		if got["expirationTimestamp"] != "2026-11-24T10:15:00.000Z" || got["collectionId"] != "SPACE-B" {
			t.Errorf("got %v", got)
		}
	})
}

// signersJSON returns n valid url signers.
func signersJSON(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"fullName":"Signer %d","accessKind":"url"}`, i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func watchersJSON(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"name":"W %d","email":"w%d@example.com","notificationKinds":"signed"}`, i, i)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func TestCreateLimits(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		for _, tc := range []struct {
			signers, watchers int
			want              []string
		}{
			{1, 0, nil},
			{26, 50, nil},
			{27, 0, []string{"signers=too_many"}},
			{0, 0, []string{"signers=required"}},
			{1, 51, []string{"watchers=too_many"}},
		} {
			t.Run(fmt.Sprintf("%d signers %d watchers", tc.signers, tc.watchers), func(t *testing.T) {
				body := fmt.Sprintf(`{"templateId":"PAGE-1","name":"N","signers":%s,"watchers":%s}`, signersJSON(tc.signers), watchersJSON(tc.watchers))
				w := f.do(alice, http.MethodPost, Prefix, body)
				if tc.want == nil {
					if w.Code != http.StatusCreated {
						t.Fatalf("status %d: %s", w.Code, w.Body)
					}
					got := decodeObject(t, w)
					if n := len(got["signers"].([]any)); n != tc.signers {
						t.Errorf("%d signers stored", n)
					}
					if ws, _ := got["watchers"].([]any); len(ws) != tc.watchers {
						t.Errorf("%d watchers stored", len(ws))
					}
					return
				}
				d := decodeProblem(t, w, http.StatusBadRequest, "invalid_request")
				if got := fieldCodes(d); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("errors %v, want %v", got, tc.want)
				}
			})
		}
	})
}

func TestCreateValidation(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		long := strings.Repeat("é", 256)
		// Each case is a body with its expected field errors, in order.
		cases := []struct {
			name string
			body string
			want []string
		}{
			{"missing everything", `{}`, []string{"templateId=required", "name=required", "signers=required"}},
			{"non-ASCII template id", `{"templateId":"PÄGE","name":"N","signers":[{"fullName":"S","accessKind":"url"}]}`, []string{"templateId=invalid"}},
			{"template id too long", `{"templateId":"` + strings.Repeat("p", 256) + `","name":"N","signers":[{"fullName":"S","accessKind":"url"}]}`, []string{"templateId=invalid"}},
			{"unknown template", `{"templateId":"PAGE-9","name":"N","signers":[{"fullName":"S","accessKind":"url"}]}`, []string{"templateId=unknown_template"}},
			{"name only spaces", `{"templateId":"PAGE-1","name":"   ","signers":[{"fullName":"S","accessKind":"url"}]}`, []string{"name=invalid"}},
			{"name 256 characters", `{"templateId":"PAGE-1","name":"` + long + `","signers":[{"fullName":"S","accessKind":"url"}]}`, []string{"name=invalid"}},
			{"name with control character", `{"templateId":"PAGE-1","name":"a\u0007b","signers":[{"fullName":"S","accessKind":"url"}]}`, []string{"name=invalid"}},
			{"signer without name or kind", `{"templateId":"PAGE-1","name":"N","signers":[{}]}`, []string{"signers[0].fullName=required", "signers[0].accessKind=required"}},
			{"bad access kind", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"sms"}]}`, []string{"signers[0].accessKind=invalid"}},
			{"email required for email access", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"email"}]}`, []string{"signers[0].email=required"}},
			{"malformed email", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"email","email":"not-an-address"}]}`, []string{"signers[0].email=invalid"}},
			{"email with display name", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"email","email":"Ann <ann@example.com>"}]}`, []string{"signers[0].email=invalid"}},
			{"email in angle brackets", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"email","email":"<ann@example.com>"}]}`, []string{"signers[0].email=invalid"}},
			{"phone without plus", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","phone":"0041446681800"}]}`, []string{"signers[0].phone=invalid"}},
			{"phone too short", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","phone":"+4144668"}]}`, []string{"signers[0].phone=invalid"}},
			{"phone too long", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","phone":"+4144668180012345"}]}`, []string{"signers[0].phone=invalid"}},
			{"phone with spaces", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","phone":"+41 44 668 18 00"}]}`, []string{"signers[0].phone=invalid"}},
			{"phone not a valid number", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","phone":"+99912345678"}]}`, []string{"signers[0].phone=invalid"}},
			{"otp sms without phone", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","otpMethod":"sms"}]}`, []string{"signers[0].otpMethod=invalid"}},
			{"otp email without email", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","otpMethod":"email"}]}`, []string{"signers[0].otpMethod=invalid"}},
			{"otp unknown", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","otpMethod":"pigeon"}]}`, []string{"signers[0].otpMethod=invalid"}},
			{"signing methods empty", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","signerSigningMethods":[]}]}`, []string{"signers[0].signerSigningMethods=invalid"}},
			{"signing methods repeated", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","signerSigningMethods":["draw","draw"]}]}`, []string{"signers[0].signerSigningMethods=invalid"}},
			{"signing methods unknown", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","signerSigningMethods":["stamp"]}]}`, []string{"signers[0].signerSigningMethods=invalid"}},
			{"watcher empty", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url"}],"watchers":[{}]}`, []string{"watchers[0].name=required", "watchers[0].email=required", "watchers[0].notificationKinds=required"}},
			{"watcher kinds repeated", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url"}],"watchers":[{"name":"W","email":"w@example.com","notificationKinds":"signed|signed"}]}`, []string{"watchers[0].notificationKinds=invalid"}},
			{"watcher kinds unknown", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url"}],"watchers":[{"name":"W","email":"w@example.com","notificationKinds":"signed|archived"}]}`, []string{"watchers[0].notificationKinds=invalid"}},
			{"watcher kinds empty part", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url"}],"watchers":[{"name":"W","email":"w@example.com","notificationKinds":"signed|"}]}`, []string{"watchers[0].notificationKinds=invalid"}},
			{"watcher email bad", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url"}],"watchers":[{"name":"W","email":"w@","notificationKinds":"completed-contract"}]}`, []string{"watchers[0].email=invalid"}},
			{
				"every violation at once",
				`{"templateId":"PAGE-9","name":"","signers":[
				{"fullName":"A","accessKind":"url"},
				{"fullName":"B","accessKind":"url"},
				{"fullName":"C","accessKind":"url"},
				{"fullName":"D","accessKind":"email","otpMethod":"sms"}],
			  "watchers":[{"name":"W","email":"w@example.com","notificationKinds":"sent"}],
			  "expirationTimestamp":"2020-01-01T00:00:00Z"}`,
				[]string{"templateId=unknown_template", "name=required", "signers[3].email=required", "signers[3].otpMethod=invalid",
					"watchers[0].notificationKinds=invalid", "expirationTimestamp=invalid"},
			},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				w := f.do(alice, http.MethodPost, Prefix, tc.body)
				d := decodeProblem(t, w, http.StatusBadRequest, "invalid_request")
				if got := fieldCodes(d); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("errors %v\nwant   %v", got, tc.want)
				}
				for _, e := range d.Errors {
					if e.Message == "" {
						t.Errorf("%s has no message", e.Field)
					}
				}
			})
		}
		if n := f.bucketLen(bucketContracts); n != 0 {
			t.Errorf("%d contracts stored by refused requests", n)
		}
	})
}

func TestCreatePhoneNeedsSMS(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db, func(c *Config) { c.SMSConfigured = false })
		w := f.do(alice, http.MethodPost, Prefix, `{"templateId":"PAGE-1","name":"N","signers":[
		{"fullName":"S","accessKind":"url","phone":"+41446681800"},
		{"fullName":"T","accessKind":"email","email":"t@example.com"}]}`)
		d := decodeProblem(t, w, http.StatusBadRequest, "invalid_request")
		if got := fieldCodes(d); !reflect.DeepEqual(got, []string{"signers[0].phone=sms_not_configured"}) {
			t.Errorf("errors %v", got)
		}
	})
}

func TestCreateBodyRules(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		valid := `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url"}]}`
		cases := []struct {
			name, body, contentType string
			status                  int
			code                    string
		}{
			{"not JSON media type", valid, "text/plain", http.StatusUnsupportedMediaType, "unsupported_media_type"},
			{"no media type", valid, "", http.StatusUnsupportedMediaType, "unsupported_media_type"},
			{"over 1 MiB", `{"templateId":"PAGE-1","name":"` + strings.Repeat("x", 1<<20) + `"}`, "application/json", http.StatusRequestEntityTooLarge, "payload_too_large"},
			{"unknown field", `{"templateId":"PAGE-1","name":"N","colour":"red","signers":[]}`, "application/json", http.StatusBadRequest, "invalid_request"},
			{"unknown signer field", `{"templateId":"PAGE-1","name":"N","signers":[{"fullName":"S","accessKind":"url","age":3}]}`, "application/json", http.StatusBadRequest, "invalid_request"},
			{"malformed", `{"templateId":`, "application/json", http.StatusBadRequest, "invalid_request"},
			{"wrong type", `{"templateId":"PAGE-1","name":"N","sequentialSigning":"yes","signers":[]}`, "application/json", http.StatusBadRequest, "invalid_request"},
			{"charset parameter is fine", valid, "application/json; charset=utf-8", http.StatusCreated, ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				w := f.do(alice, http.MethodPost, Prefix, tc.body, "Content-Type", tc.contentType)
				if tc.status == http.StatusCreated {
					if w.Code != tc.status {
						t.Fatalf("status %d: %s", w.Code, w.Body)
					}
					return
				}
				decodeProblem(t, w, tc.status, tc.code)
			})
		}
	})
}

func TestCreateSealsTokenToItsSigner(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		c, err := f.store.Create(ctx(), alice, &CreateRequest{TemplateID: "PAGE-1", Name: "N",
			Signers: []SignerRequest{{FullName: "A", AccessKind: "url"}, {FullName: "B", AccessKind: "url"}}})
		if err != nil {
			t.Fatal(err)
		}
		stored := mustGet(t, f, c.ID)
		for i := range stored.Signers {
			want, _ := f.store.AccessURL(c, i)
			got, err := f.store.AccessURL(stored, i)
			if err != nil || got != want {
				t.Errorf("signer %d: unsealed %q, created %q, %v", i, got, want, err)
			}
			tok := strings.TrimPrefix(want, baseURL+"/sign/")
			if stored.Signers[i].TokenHash != token.HashOf(tok) {
				t.Errorf("signer %d: stored hash is not the token's", i)
			}
		}
		// A sealed token moved to another signer does not open.
		stored.Signers[0].SealedToken, stored.Signers[1].SealedToken = stored.Signers[1].SealedToken, stored.Signers[0].SealedToken
		if _, err := f.store.AccessURL(stored, 0); err == nil {
			t.Error("a token sealed for signer 1 opened for signer 0")
		}
	})
}

func TestNoIdentityIs500(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		for _, r := range [][2]string{{http.MethodGet, Prefix}, {http.MethodPost, Prefix}, {http.MethodGet, Prefix + "/x"}} {
			w := f.do("", r[0], r[1], "")
			d := decodeProblem(t, w, http.StatusInternalServerError, "internal")
			if d.Errors != nil {
				t.Errorf("500 tells %v", d.Errors)
			}
		}
	})
}
