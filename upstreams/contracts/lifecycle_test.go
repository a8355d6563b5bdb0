package contracts

import (
	"errors"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"go.etcd.io/bbolt"
)

func TestGet(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		id := f.create(alice, fullBody)["id"].(string)
		cases := []struct {
			name, owner, path string
			status            int
			accessURLs        bool
		}{
			{"creator sees links", alice, Prefix + "/" + id, http.StatusOK, true},
			{"upper-case id", alice, Prefix + "/" + strings.ToUpper(id), http.StatusOK, true},
			{"other owner sees no links", bob, Prefix + "/" + id, http.StatusOK, false},
			{"unknown id", alice, Prefix + "/0190d3f2-7b3c-7e4a-9f2b-3c4d5e6f7a8b", http.StatusNotFound, false},
			{"malformed id", alice, Prefix + "/not-a-uuid", http.StatusNotFound, false},
			{"id without hyphens", alice, Prefix + "/" + strings.ReplaceAll(id, "-", ""), http.StatusNotFound, false},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				w := f.do(tc.owner, http.MethodGet, tc.path, "")
				if tc.status == http.StatusNotFound {
					decodeProblem(t, w, http.StatusNotFound, "not_found")
					return
				}
				if w.Code != tc.status {
					t.Fatalf("status %d", w.Code)
				}
				if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
					t.Errorf("Cache-Control %q", cc)
				}
				got := decodeObject(t, w)
				if got["id"] != id {
					t.Errorf("id %v", got["id"])
				}
				for _, s := range got["signers"].([]any) {
					_, has := s.(map[string]any)["accessUrl"]
					if has != tc.accessURLs {
						t.Errorf("accessUrl present %v, want %v", has, tc.accessURLs)
					}
				}
			})
		}
	})
}

func TestExpiryTakesEffectAtReadTime(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		id := f.createNamed(alice, "PAGE-1", "Expiring")
		expires := t0.Add(DefaultContractValidity)
		for _, tc := range []struct {
			at     time.Time
			status string
			found  string // statuses filter that finds it
		}{
			{expires.Add(-time.Millisecond), "sent", "sent"},
			{expires, "expired", "expired"},
			{expires.Add(time.Hour), "expired", "sent|expired"},
		} {
			f.clock.Set(tc.at)
			if got := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+id, ""))["status"]; got != tc.status {
				t.Errorf("at %v: get status %v, want %s", tc.at, got, tc.status)
			}
			other := "expired"
			if tc.status == "expired" {
				other = "sent|ongoing"
			}
			if n := searchCount(t, f, "statuses="+tc.found); n != 1 {
				t.Errorf("at %v: statuses=%s finds %d", tc.at, tc.found, n)
			}
			if n := searchCount(t, f, "statuses="+other); n != 0 {
				t.Errorf("at %v: statuses=%s finds %d", tc.at, other, n)
			}
			page := searchPageOf(t, f, "statuses=any")
			if page.Contracts[0]["status"] != tc.status {
				t.Errorf("at %v: search shows %v", tc.at, page.Contracts[0]["status"])
			}
		}
		// The sweeper writes it down; reads stay the same.
		n, err := f.store.SweepExpired(ctx(), 0)
		if err != nil || n != 1 {
			t.Fatalf("sweep: %d, %v", n, err)
		}
		if n := f.bucketLen(bucketByExpiry); n != 0 {
			t.Errorf("%d expiry entries left", n)
		}
		if n := searchCount(t, f, "statuses=expired"); n != 1 {
			t.Errorf("after sweep statuses=expired finds %d", n)
		}
		if n, _ := f.store.SweepExpired(ctx(), 0); n != 0 {
			t.Errorf("second sweep wrote %d", n)
		}
	})
}

func TestArchive(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		id := f.createNamed(alice, "PAGE-1", "To archive")
		other := f.createNamed(alice, "PAGE-1", "Stays")

		f.clock.Set(t0.Add(time.Hour))
		w := f.do(alice, http.MethodPatch, Prefix+"/"+id, "")
		if w.Code != http.StatusNoContent || w.Body.Len() != 0 {
			t.Fatalf("archive: %d %s", w.Code, w.Body)
		}
		first := "2026-11-22T11:15:00.000Z"
		if got := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+id, ""))["archivalTimestamp"]; got != first {
			t.Errorf("archivalTimestamp %v", got)
		}

		f.clock.Set(t0.Add(2 * time.Hour))
		if w := f.do(alice, http.MethodPatch, Prefix+"/"+id, ""); w.Code != http.StatusNoContent {
			t.Fatalf("archive again: %d", w.Code)
		}
		if got := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+id, ""))["archivalTimestamp"]; got != first {
			t.Errorf("archiving again moved archivalTimestamp to %v", got)
		}

		for _, tc := range []struct {
			query string
			ids   []string
		}{
			{"", []string{other}},
			{"placement=stacked", []string{other}},
			{"placement=archived", []string{id}},
			{"placement=any&order=creation-date-asc", []string{id, other}},
		} {
			if got := searchIDs(t, f, tc.query); !equalStrings(got, tc.ids) {
				t.Errorf("%q: %v, want %v", tc.query, got, tc.ids)
			}
		}

		d := decodeProblem(t, f.do(alice, http.MethodPatch, Prefix+"/"+other, `{"archive":true}`), http.StatusBadRequest, "invalid_request")
		if d.Detail == "" {
			t.Error("no detail")
		}
		if _, has := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+other, ""))["archivalTimestamp"]; has {
			t.Error("a refused archive archived")
		}
		decodeProblem(t, f.do(alice, http.MethodPatch, Prefix+"/0190d3f2-7b3c-7e4a-9f2b-3c4d5e6f7a8b", ""), http.StatusNotFound, "not_found")
		decodeProblem(t, f.do(alice, http.MethodPatch, Prefix+"/nope", ""), http.StatusNotFound, "not_found")
	})
}

func TestDelete(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		var hooked []string
		f := newFixtureOn(t, db, func(c *Config) {
			c.OnDelete = func(tx storage.Tx, c *Contract) error {
				if !writable(tx) {
					return errors.New("read-only tx")
				}
				hooked = append(hooked, c.ID)
				return nil
			}
		})
		created := f.create(alice, fullBody)
		id := created["id"].(string)
		keep := f.createNamed(bob, "PAGE-1", "Keep") // shares the document
		var tokens []string
		for _, s := range created["signers"].([]any) {
			tokens = append(tokens, strings.TrimPrefix(s.(map[string]any)["accessUrl"].(string), baseURL+"/sign/"))
		}
		if err := f.store.Archive(ctx(), id); err != nil {
			t.Fatal(err)
		}

		w := f.do(alice, http.MethodDelete, Prefix+"/"+id, "")
		if w.Code != http.StatusNoContent || w.Body.Len() != 0 {
			t.Fatalf("delete: %d %s", w.Code, w.Body)
		}
		if len(hooked) != 1 || hooked[0] != id {
			t.Errorf("OnDelete saw %v", hooked)
		}
		decodeProblem(t, f.do(alice, http.MethodGet, Prefix+"/"+id, ""), http.StatusNotFound, "not_found")
		for _, tok := range tokens {
			if _, _, err := f.store.BySigningToken(ctx(), tok); !problem.IsNotFound(err) {
				t.Errorf("signing link still answers: %v", err)
			}
		}
		// Only the kept contract's entries are left.
		for _, b := range [][]byte{bucketContracts, bucketRows, bucketByTemplate, bucketByCreator,
			bucketByTemplateCreator, bucketByPlacement, bucketByStatus, bucketByExpiry, bucketSigningTokens,
			bucketDocuments, bucketDocumentRefs} {
			if n := f.bucketLen(b); n != 1 {
				t.Errorf("bucket %s holds %d keys, want 1", b, n)
			}
		}
		if got := searchIDs(t, f, "placement=any"); !equalStrings(got, []string{keep}) {
			t.Errorf("search finds %v", got)
		}
		if _, err := f.store.Document(ctx(), mustGet(t, f, keep)); err != nil {
			t.Errorf("shared document went with the other contract: %v", err)
		}
		decodeProblem(t, f.do(alice, http.MethodDelete, Prefix+"/"+id, ""), http.StatusNotFound, "not_found")

		// The last holder takes the document and every counter with it.
		if w := f.do(alice, http.MethodDelete, Prefix+"/"+keep, ""); w.Code != http.StatusNoContent {
			t.Fatalf("delete: %d", w.Code)
		}
		for _, b := range storeBuckets {
			if n := f.bucketLen(b); n != 0 {
				t.Errorf("bucket %s holds %d keys after deleting everything", b, n)
			}
		}
	})
}

func TestDeleteHookFailureKeepsContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db, func(c *Config) {
			c.OnDelete = func(storage.Tx, *Contract) error { return errors.New("outbox unavailable") }
		})
		id := f.createNamed(alice, "PAGE-1", "N")
		decodeProblem(t, f.do(alice, http.MethodDelete, Prefix+"/"+id, ""), http.StatusInternalServerError, "internal")
		if w := f.do(alice, http.MethodGet, Prefix+"/"+id, ""); w.Code != http.StatusOK {
			t.Errorf("get after failed delete: %d", w.Code)
		}
		if n := searchCount(t, f, ""); n != 1 {
			t.Errorf("search finds %d", n)
		}
	})
}

func TestRouting(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		id := f.createNamed(alice, "PAGE-1", "N")
		cases := []struct {
			method, path string
			status       int
			code, allow  string
		}{
			{http.MethodPut, Prefix, http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD, POST"},
			{http.MethodPost, Prefix + "/" + id, http.StatusMethodNotAllowed, "method_not_allowed", "GET, HEAD, PATCH, DELETE"},
			{http.MethodGet, Prefix + "/" + id + "/attachments/a1", http.StatusNotFound, "not_found", ""},
			{http.MethodGet, Prefix + "/" + id + "/signers", http.StatusNotFound, "not_found", ""},
			{http.MethodGet, "/elsewhere", http.StatusNotFound, "not_found", ""},
		}
		for _, tc := range cases {
			w := f.do(alice, tc.method, tc.path, "")
			decodeProblem(t, w, tc.status, tc.code)
			if got := w.Header().Get("Allow"); got != tc.allow {
				t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
			}
		}
		if w := f.do(alice, http.MethodHead, Prefix+"/"+id, ""); w.Code != http.StatusOK {
			t.Errorf("HEAD: %d", w.Code)
		}
	})
}

func TestUpdateSettlesStatusAndIndexes(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		c, err := f.store.Create(ctx(), alice, &CreateRequest{TemplateID: "PAGE-1", Name: "Two",
			Signers: []SignerRequest{{FullName: "A", AccessKind: "url"}, {FullName: "B", AccessKind: "url"}}})
		if err != nil {
			t.Fatal(err)
		}
		rejected := f.createNamed(alice, "PAGE-2", "Rejected")
		decide := func(id string, i int, decision string) {
			t.Helper()
			_, err := f.store.Update(ctx(), id, func(_ storage.Tx, c *Contract) error {
				c.Signers[i].Decision = decision
				c.Signers[i].DecisionTimestamp = f.clock.Now()
				c.Signers[i].DecisionIP = "192.0.2.7"
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		decide(c.ID, 0, DecisionSigned)
		decide(rejected, 0, DecisionRejected)
		if got := searchIDs(t, f, "statuses=ongoing"); !equalStrings(got, []string{c.ID}) {
			t.Errorf("ongoing: %v", got)
		}
		if got := searchIDs(t, f, "statuses=rejected"); !equalStrings(got, []string{rejected}) {
			t.Errorf("rejected: %v", got)
		}
		got := decodeObject(t, f.do(alice, http.MethodGet, Prefix+"/"+c.ID, ""))
		s0 := got["signers"].([]any)[0].(map[string]any)
		if s0["decision"] != "signed" || s0["decisionTimestamp"] != "2026-11-22T10:15:00.000Z" || s0["decisionIp"] != "192.0.2.7" {
			t.Errorf("signer 0 %v", s0)
		}
		decide(c.ID, 1, DecisionSigned)
		if got := searchIDs(t, f, "statuses=signed"); !equalStrings(got, []string{c.ID}) {
			t.Errorf("signed: %v", got)
		}
		// A signed contract does not expire.
		f.clock.Advance(30 * 24 * time.Hour)
		if got := searchIDs(t, f, "statuses=signed|expired"); !equalStrings(got, []string{c.ID}) {
			t.Errorf("after expiry: %v", got)
		}
		if got := mustGet(t, f, c.ID).Status; got != StatusSigned {
			t.Errorf("status %s", got)
		}
		if n := searchCount(t, f, "statuses=sent|ongoing"); n != 0 {
			t.Errorf("%d still live", n)
		}
		if _, err := f.store.Update(ctx(), "nope", nil); !problem.IsNotFound(err) {
			t.Errorf("update of unknown id: %v", err)
		}
	})
}

// TestExpiredThroughIndexes finds expired contracts through the status and
// expiry indexes, once the planner prefers them to reading every row.
func TestExpiredThroughIndexes(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		var live, signed []string
		for i := 0; i < 12; i++ {
			id := f.createNamed(alice, "PAGE-1", "N")
			if i < 2 {
				live = append(live, id)
				continue
			}
			signed = append(signed, id)
			if _, err := f.store.Update(ctx(), id, func(_ storage.Tx, c *Contract) error {
				c.Signers[0].Decision = DecisionSigned
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		// One live contract gets a later expiry.
		if _, err := f.store.Update(ctx(), live[1], func(_ storage.Tx, c *Contract) error {
			c.ExpirationTimestamp = c.ExpirationTimestamp.Add(24 * time.Hour)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(DefaultContractValidity)
		for _, tc := range []struct {
			query string
			want  []string
		}{
			{"statuses=expired", live[:1]},
			{"statuses=sent", live[1:]},
			{"statuses=sent|expired|sent&order=creation-date-asc", live},
			{"statuses=ongoing|expired", live[:1]},
		} {
			q, err := ParseQuery(mustQuery(t, tc.query))
			if err != nil {
				t.Fatal(err)
			}
			if f.bolt != nil {
				f.bolt.View(func(tx *bbolt.Tx) error {
					if p := choosePlan(tx, &q); string(p.sources[0].bucket) != string(bucketByStatus) {
						t.Errorf("%q reads %s", tc.query, p.sources[0].bucket)
					}
					return nil
				})
			}
			if got := searchIDs(t, f, tc.query); !equalStrings(got, tc.want) {
				t.Errorf("%q: %v, want %v", tc.query, got, tc.want)
			}
		}
		if n := searchCount(t, f, "statuses=signed"); n != len(signed) {
			t.Errorf("signed: %d", n)
		}
	})
}
