package contracts

import (
	"encoding/json"
	"fmt"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
)

type pageReply struct {
	TotalCount *int             `json:"totalCount"`
	Contracts  []map[string]any `json:"contracts"`
	raw        map[string]json.RawMessage
}

func searchPageOf(t *testing.T, f *fixture, query string) pageReply {
	t.Helper()
	w := f.do(alice, http.MethodGet, Prefix+"?"+query, "")
	if w.Code != http.StatusOK {
		t.Fatalf("search %q: %d %s", query, w.Code, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var p pageReply
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(w.Body.Bytes(), &p.raw)
	if p.TotalCount == nil {
		t.Fatalf("search %q: no totalCount in %s", query, w.Body)
	}
	if c, ok := p.raw["contracts"]; ok && (len(p.Contracts) == 0 || string(c) == "null") {
		t.Fatalf("search %q: contracts present but empty: %s", query, w.Body)
	}
	return p
}

func searchCount(t *testing.T, f *fixture, query string) int {
	t.Helper()
	return *searchPageOf(t, f, query).TotalCount
}

func searchIDs(t *testing.T, f *fixture, query string) []string {
	t.Helper()
	var ids []string
	for _, c := range searchPageOf(t, f, query).Contracts {
		ids = append(ids, c["id"].(string))
	}
	return ids
}

func mustQuery(t *testing.T, q string) url.Values {
	t.Helper()
	v, err := url.ParseQuery(q)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func equalStrings(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || reflect.DeepEqual(a, b))
}

// sortedIDs returns ids in id order, the tie break of every order.
func sortedIDs(ids ...string) []string {
	s := slices.Clone(ids)
	slices.Sort(s)
	return s
}

// searchSet is five contracts around a day boundary:
//
//	c1 alice PAGE-1 "Zebra lease"      2026-11-20T12:00Z  signer Ann Tenant, ann@example.com
//	c2 bob   PAGE-1 "apple deal"       2026-11-21T23:30Z  (22nd in Zurich, 21st in New York)
//	c3 alice PAGE-2 "Straße contract"  2026-11-22T00:30Z  (21st at UTC-05:00)
//	c4 bob   PAGE-2 "ÉCOLE agreement"  2026-11-22T10:00Z  signer Σίσυφος, SISYPHUS@Example.com
//	c5 alice PAGE-1 "apple deal"       2026-11-22T10:00Z  (ties c4 on time, c2 on name)
type searchSet struct {
	f                  *fixture
	c1, c2, c3, c4, c5 string
}

func newSearchSet(t *testing.T, db storage.DB) *searchSet {
	f := newFixtureOn(t, db)
	mk := func(at time.Time, owner, template, name, signer string) string {
		f.clock.Set(at)
		return f.create(owner, fmt.Sprintf(`{"templateId":%q,"name":%q,"signers":[%s],
			"watchers":[{"name":"W","email":"w@example.com","notificationKinds":"completed"}]}`, template, name, signer))["id"].(string)
	}
	plain := `{"fullName":"Sam Signer","accessKind":"url"}`
	s := &searchSet{f: f}
	s.c1 = mk(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC), alice, "PAGE-1", "Zebra lease",
		`{"fullName":"Ann Tenant","accessKind":"email","email":"ann@example.com"}`)
	s.c2 = mk(time.Date(2026, 11, 21, 23, 30, 0, 0, time.UTC), bob, "PAGE-1", "apple deal", plain)
	s.c3 = mk(time.Date(2026, 11, 22, 0, 30, 0, 0, time.UTC), alice, "PAGE-2", "Straße contract", plain)
	s.c4 = mk(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), bob, "PAGE-2", "ÉCOLE agreement",
		`{"fullName":"Σίσυφος","accessKind":"email","email":"SISYPHUS@Example.com"}`)
	s.c5 = mk(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), alice, "PAGE-1", "apple deal", plain)
	f.clock.Set(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	return s
}

func TestSearchFilters(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		s := newSearchSet(t, db)
		c1, c2, c3, c4, c5 := s.c1, s.c2, s.c3, s.c4, s.c5
		// All with creation-date-asc, so the expected order is plain.
		cases := []struct {
			query string
			want  []string
		}{
			{"", []string{c1, c2, c3, c4, c5}},
			{"template-id=PAGE-1", []string{c1, c2, c5}},
			{"template-id=PAGE-9", nil},
			{"creator-id=alice", []string{c1, c3, c5}},
			{"creator-id=alice&template-id=PAGE-1", []string{c1, c5}},
			{"creator-id=carol", nil},
			{"statuses=any", []string{c1, c2, c3, c4, c5}},
			{"statuses=sent", []string{c1, c2, c3, c4, c5}},
			{"statuses=ongoing|signed|rejected|expired", nil},
			{"placement=any", []string{c1, c2, c3, c4, c5}},
			{"placement=archived", nil},
			// Substring: case-insensitive with Unicode folding, in name, signer name and e-mail.
			{"substring=APPLE", []string{c2, c5}},
			{"substring=strasse", []string{c3}},
			{"substring=STRASSE", []string{c3}},
			{"substring=Straße", []string{c3}},
			{"substring=%C3%A9cole", []string{c4}},
			{"substring=%CF%83%CE%AF%CF%83%CF%85%CF%86%CE%BF%CF%82", []string{c4}}, // σίσυφος
			{"substring=sisyphus%40example", []string{c4}},
			{"substring=ann%40", []string{c1}},
			{"substring=tenant", []string{c1}},
			{"substring=signer", []string{c2, c3, c5}},
			{"substring=lease", []string{c1}}, // the template's title is not searched
			{"substring=deal&creator-id=bob", []string{c2}},
			{"substring=zzz", nil},
			{"substring=a%20l", []string{c1}},
			// Date ranges, UTC unless told.
			{"date-range=2026-11-21", []string{c2}},
			{"date-range=2026-11-22", []string{c3, c4, c5}},
			{"date-range=2026-11-21~", []string{c2, c3, c4, c5}},
			{"date-range=~2026-11-21", []string{c1, c2}},
			{"date-range=2026-11-20~2026-11-21", []string{c1, c2}},
			{"date-range=2026-11-22~2026-11-22", []string{c3, c4, c5}},
			{"date-range=2026-11-23~", nil},
			{"date-range=~1969-12-31", nil},
			{"date-range=1960-01-01~2026-11-20", []string{c1}},
			// The same dates in other zones move the day boundary.
			{"date-range=2026-11-21&time-zone=Europe/Zurich", nil},
			{"date-range=2026-11-22&time-zone=Europe/Zurich", []string{c2, c3, c4, c5}},
			{"date-range=2026-11-22&time-zone=UTC%2B01:00", []string{c2, c3, c4, c5}},
			{"date-range=2026-11-21&time-zone=America/New_York", []string{c2, c3}},
			{"date-range=2026-11-21&time-zone=UTC-05:00", []string{c2, c3}},
			{"date-range=2026-11-21&time-zone=Z", []string{c2}},
			{"date-range=2026-11-21&time-zone=UTC", []string{c2}},
			{"date-range=2026-11-21&time-zone=UTC%2B00:00", []string{c2}},
			{"date-range=~2026-11-21&time-zone=Asia/Kolkata", []string{c1}},
			{"date-range=2026-11-22&time-zone=UTC-05:30&template-id=PAGE-2", []string{c4}},
			{"date-range=2026-11-22&statuses=sent&creator-id=alice", []string{c3, c5}},
		}
		for _, tc := range cases {
			t.Run(tc.query, func(t *testing.T) {
				q := "order=creation-date-asc"
				if tc.query != "" {
					q += "&" + tc.query
				}
				p := searchPageOf(t, s.f, q)
				var got []string
				for _, c := range p.Contracts {
					got = append(got, c["id"].(string))
				}
				// c4 and c5 tie on time: ties go by id.
				want := fixTie(tc.want, c4, c5)
				if !equalStrings(got, want) || *p.TotalCount != len(want) {
					t.Errorf("got %v (total %d), want %v", got, *p.TotalCount, want)
				}
				if _, has := p.raw["contracts"]; has != (len(want) > 0) {
					t.Errorf("contracts present %v with %d matches", has, len(want))
				}
			})
		}
	})
}

// fixTie puts a and b, when both in ids next to each other, in id order.
func fixTie(ids []string, a, b string) []string {
	out := slices.Clone(ids)
	i, j := slices.Index(out, a), slices.Index(out, b)
	if i >= 0 && j == i+1 && b < a {
		out[i], out[j] = b, a
	}
	return out
}

func TestSearchOrders(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		s := newSearchSet(t, db)
		c1, c2, c3, c4, c5 := s.c1, s.c2, s.c3, s.c4, s.c5
		cat := func(parts ...[]string) []string { return slices.Concat(parts...) }
		cases := []struct {
			order string
			want  []string
		}{
			{"creation-date-asc", cat([]string{c1, c2, c3}, sortedIDs(c4, c5))},
			{"creation-date-desc", cat(sortedIDs(c4, c5), []string{c3, c2, c1})},
			// Folded names: "apple deal" ×2, "strasse contract", "zebra lease", "école agreement".
			{"name-asc", cat(sortedIDs(c2, c5), []string{c3, c1, c4})},
			{"name-desc", cat([]string{c4, c1, c3}, sortedIDs(c2, c5))},
			{"creator-id-asc", cat(sortedIDs(c1, c3, c5), sortedIDs(c2, c4))},
			{"creator-id-desc", cat(sortedIDs(c2, c4), sortedIDs(c1, c3, c5))},
		}
		for _, tc := range cases {
			t.Run(tc.order, func(t *testing.T) {
				if got := searchIDs(t, s.f, "order="+tc.order); !equalStrings(got, tc.want) {
					t.Errorf("got  %v\nwant %v", got, tc.want)
				}
				// Pages of every size cut the same order, also through ties.
				for size := 1; size <= 5; size++ {
					var paged []string
					for page := 1; page <= (5+size-1)/size; page++ {
						paged = append(paged, searchIDs(t, s.f, fmt.Sprintf("order=%s&page-size=%d&page=%d", tc.order, size, page))...)
					}
					if !equalStrings(paged, tc.want) {
						t.Errorf("pages of %d: %v\nwant  %v", size, paged, tc.want)
					}
				}
				p := searchPageOf(t, s.f, "order="+tc.order+"&page-size=2&page=4")
				if *p.TotalCount != 5 || p.Contracts != nil {
					t.Errorf("page past the end: total %d, %d contracts", *p.TotalCount, len(p.Contracts))
				}
			})
		}
		t.Run("random", func(t *testing.T) {
			all := []string{c1, c2, c3, c4, c5}
			for _, q := range []string{"", "order=random&page-size=3", "order=random&page-size=3&page=7"} {
				p := searchPageOf(t, s.f, q)
				ids := []string{}
				for _, c := range p.Contracts {
					ids = append(ids, c["id"].(string))
				}
				want := 5
				if q != "" {
					want = 3
				}
				slices.Sort(ids)
				if *p.TotalCount != 5 || len(ids) != want || len(slices.Compact(slices.Clone(ids))) != want {
					t.Errorf("%q: total %d, ids %v", q, *p.TotalCount, ids)
				}
				for _, id := range ids {
					if !slices.Contains(all, id) {
						t.Errorf("%q: unknown id %s", q, id)
					}
				}
			}
		})
	})
}

func TestSearchResultShape(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		s := newSearchSet(t, db)
		p := searchPageOf(t, s.f, "order=creation-date-asc&page-size=1")
		c := p.Contracts[0]
		for _, k := range []string{"signers", "watchers", "archivalTimestamp"} {
			if _, has := c[k]; has {
				t.Errorf("search result has %s", k)
			}
		}
		want := map[string]any{"id": s.c1, "templateId": "PAGE-1", "collectionId": "SPACE-A", "name": "Zebra lease",
			"createdById": alice, "creationTimestamp": "2026-11-20T12:00:00.000Z",
			"expirationTimestamp": "2026-11-27T12:00:00.000Z", "sequentialSigning": false, "status": "sent"}
		if !reflect.DeepEqual(c, want) {
			t.Errorf("got  %v\nwant %v", c, want)
		}
	})
}

func TestSearchPageSize(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		for i := 0; i < 101; i++ {
			f.clock.Advance(time.Second)
			if _, err := f.store.Create(ctx(), alice, &CreateRequest{TemplateID: "PAGE-1", Name: fmt.Sprintf("C %03d", i),
				Signers: []SignerRequest{{FullName: "S", AccessKind: "url"}}}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			query string
			n     int
		}{
			{"", DefaultPageSize},
			{"page-size=1", 1},
			{"page-size=100", 100},
			{"page-size=100&page=2&order=name-asc", 1},
			{"page-size=10&page=11&order=creation-date-desc", 1},
			{"page-size=10&page=12&order=creation-date-desc", 0},
		} {
			p := searchPageOf(t, f, tc.query)
			if *p.TotalCount != 101 || len(p.Contracts) != tc.n {
				t.Errorf("%q: total %d, %d contracts, want %d", tc.query, *p.TotalCount, len(p.Contracts), tc.n)
			}
		}
		if got := searchIDs(t, f, "page-size=1&page=1&order=name-desc"); len(got) != 1 {
			t.Fatal(got)
		} else if c := mustGet(t, f, got[0]); c.Name != "C 100" {
			t.Errorf("name-desc starts with %q", c.Name)
		}
		d := decodeProblem(t, f.do(alice, http.MethodGet, Prefix+"?page-size=101", ""), http.StatusBadRequest, "invalid_request")
		if got := fieldCodes(d); !reflect.DeepEqual(got, []string{"page-size=invalid"}) {
			t.Errorf("errors %v", got)
		}
	})
}

func TestSearchBadParameters(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		cases := []struct {
			query string
			want  []string
		}{
			{"foo=1&bar=2", []string{"bar=unknown_parameter", "foo=unknown_parameter"}},
			{"page=1&page=2", []string{"page=repeated"}},
			{"template-id=", []string{"template-id=invalid"}},
			{"template-id=P%C3%84GE", []string{"template-id=invalid"}},
			{"creator-id=%00", []string{"creator-id=invalid"}},
			{"statuses=", []string{"statuses=invalid"}},
			{"statuses=sent|bogus", []string{"statuses=invalid"}},
			{"statuses=sent|", []string{"statuses=invalid"}},
			{"statuses=any|sent", []string{"statuses=invalid"}},
			{"substring=", []string{"substring=invalid"}},
			{"substring=%07", []string{"substring=invalid"}},
			{"substring=" + strings.Repeat("x", 256), []string{"substring=invalid"}},
			{"placement=everywhere", []string{"placement=invalid"}},
			{"date-range=~", []string{"date-range=invalid"}},
			{"date-range=", []string{"date-range=invalid"}},
			{"date-range=2026-11-22~2026-11-21", []string{"date-range=invalid"}},
			{"date-range=2026-13-01", []string{"date-range=invalid"}},
			{"date-range=2026-11-2", []string{"date-range=invalid"}},
			{"date-range=20261122", []string{"date-range=invalid"}},
			{"date-range=2026-11-22~~", []string{"date-range=invalid"}},
			{"date-range=2026-11-22T00:00:00Z", []string{"date-range=invalid"}},
			{"time-zone=Mars/Olympus_Mons", []string{"time-zone=invalid"}},
			{"time-zone=UTC%2B1", []string{"time-zone=invalid"}},
			{"time-zone=UTC%2B15:00", []string{"time-zone=invalid"}},
			{"time-zone=UTC%2B01:60", []string{"time-zone=invalid"}},
			{"time-zone=Local", []string{"time-zone=invalid"}},
			{"time-zone=", []string{"time-zone=invalid"}},
			{"order=up", []string{"order=invalid"}},
			{"page=0", []string{"page=invalid"}},
			{"page=-1", []string{"page=invalid"}},
			{"page=%2B1", []string{"page=invalid"}},
			{"page=1.5", []string{"page=invalid"}},
			{"page=99999999999", []string{"page=invalid"}},
			{"page-size=0", []string{"page-size=invalid"}},
			{"page-size=101", []string{"page-size=invalid"}},
			{
				"zoo=1&template-id=&statuses=nope&substring=&placement=x&time-zone=Nowhere&date-range=x&order=x&page=x&page-size=x&creator-id=%7F",
				[]string{"zoo=unknown_parameter", "template-id=invalid", "creator-id=invalid", "statuses=invalid", "substring=invalid",
					"placement=invalid", "time-zone=invalid", "date-range=invalid", "order=invalid", "page=invalid", "page-size=invalid"},
			},
		}
		// A query string that does not decode is refused whole (found by
		// FuzzSearch: url.Values dropped the broken pair and searched without
		// it).
		cases = append(cases, []struct {
			query string
			want  []string
		}{{"substring=%zz", nil}, {"order=name-asc;page=2", nil}, {"page-size=5&%", nil}}...)
		for _, tc := range cases {
			t.Run(tc.query, func(t *testing.T) {
				d := decodeProblem(t, f.do(alice, http.MethodGet, Prefix+"?"+tc.query, ""), http.StatusBadRequest, "invalid_request")
				if got := fieldCodes(d); !reflect.DeepEqual(got, tc.want) {
					t.Errorf("errors %v\nwant   %v", got, tc.want)
				}
			})
		}
	})
}

// TestSearchPlanReadsOnlySelected checks that a filtered search reads the
// narrowest index: its candidates are the matches, not all contracts.
func TestSearchPlanReadsOnlySelected(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 30; i++ {
		owner, template := alice, "PAGE-1"
		if i%4 != 0 {
			owner = bob
		}
		if i%5 != 0 {
			template = "PAGE-2"
		}
		if _, err := f.store.Create(ctx(), owner, &CreateRequest{TemplateID: template, Name: "N",
			Signers: []SignerRequest{{FullName: "S", AccessKind: "url"}}}); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		query  string
		bucket []byte
		cost   uint64
	}{
		{"", bucketRows, 30},
		{"substring=n", bucketRows, 30},
		{"template-id=PAGE-1&creator-id=alice", bucketByTemplateCreator, 2 * indexCostFactor},
		{"template-id=PAGE-1", bucketByTemplate, 6 * indexCostFactor},
		{"creator-id=alice", bucketByCreator, 8 * indexCostFactor},
		{"placement=archived", bucketByPlacement, 0},
		{"statuses=signed", bucketByStatus, 0},
	}
	for _, tc := range cases {
		q, err := ParseQuery(mustQuery(t, tc.query))
		if err != nil {
			t.Fatal(err)
		}
		f.bolt.View(func(tx *bbolt.Tx) error {
			p := choosePlan(tx, &q)
			if string(p.sources[0].bucket) != string(tc.bucket) || p.cost != tc.cost {
				t.Errorf("%q: plan reads %s at cost %d, want %s at %d", tc.query, p.sources[0].bucket, p.cost, tc.bucket, tc.cost)
			}
			return nil
		})
		res, err := f.store.Search(ctx(), q)
		if err != nil {
			t.Fatal(err)
		}
		if string(tc.bucket) != string(bucketRows) && uint64(res.TotalCount)*indexCostFactor != tc.cost {
			t.Errorf("%q: %d matches, the index counted %d", tc.query, res.TotalCount, tc.cost/indexCostFactor)
		}
	}
}

// TestCreationOrderWindow checks the creation orders, which keep only the
// page while scanning, against a full sort, through the rows and through
// an index, with many contracts created in the same millisecond.
func TestCreationOrderWindow(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		f := newFixtureOn(t, db)
		type rec struct {
			id      string
			created time.Time
			tpl     string
		}
		var all []rec
		for i := 0; i < 40; i++ {
			if i%3 == 0 {
				f.clock.Advance(time.Millisecond)
			}
			tpl := "PAGE-2"
			if i%4 == 0 {
				tpl = "PAGE-1"
			}
			c, err := f.store.Create(ctx(), alice, &CreateRequest{TemplateID: tpl, Name: "N",
				Signers: []SignerRequest{{FullName: "S", AccessKind: "url"}}})
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, rec{c.ID, c.CreationTimestamp, tpl})
		}
		for _, filter := range []string{"", "template-id=PAGE-1&"} {
			for _, desc := range []bool{false, true} {
				var want []string
				for _, r := range all {
					if filter == "" || r.tpl == "PAGE-1" {
						want = append(want, r.id)
					}
				}
				created := map[string]time.Time{}
				for _, r := range all {
					created[r.id] = r.created
				}
				slices.SortFunc(want, func(a, b string) int {
					c := created[a].Compare(created[b])
					if desc {
						c = -c
					}
					if c != 0 {
						return c
					}
					return strings.Compare(a, b)
				})
				order := "creation-date-asc"
				if desc {
					order = "creation-date-desc"
				}
				for _, size := range []int{1, 2, 3, 7, 100} {
					var got []string
					for page := 1; len(got) < len(want) && page <= len(want); page++ {
						got = append(got, searchIDs(t, f, fmt.Sprintf("%sorder=%s&page-size=%d&page=%d", filter, order, size, page))...)
					}
					if !equalStrings(got, want) {
						t.Errorf("%s%s pages of %d:\n got %v\nwant %v", filter, order, size, got, want)
					}
				}
			}
		}
	})
}
