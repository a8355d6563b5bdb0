package contracts

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// parityContracts and parityQueries size the parity test.
const (
	parityContracts = 3000
	parityQueries   = 1000
)

var (
	parityWords = []string{"Straße", "STRASSE", "strasse", "École", "école", "ECOLE", "Σίσυφος", "ΣΊΣΥΦΟΣ",
		"apple", "Apple", "APPLE", "ﬁne", "FINE", "İstanbul", "istanbul", "Kelvin", "\u212aelvin", "Ǆemal",
		"lease", "Lease", "NDA", "zebra", "Zebra", "日本語", "ÅRHUS", "århus", "naïve", "NAÏVE", "100%", "a_b",
		`back\slash`, "émoji 🙂", "Ω", "ω", "ß", "ẞ"}
	parityTemplates = []string{"PAGE-1", "PAGE-2", "PAGE-3", "TPL-4"}
	parityCreators  = []string{"alice", "bob", "carol", "Dave", "dave", "ZED"}
	parityZones     = []string{"", "UTC", "Z", "Europe/Berlin", "America/Los_Angeles", "Asia/Kolkata",
		"UTC+05:45", "UTC-03:30", "Pacific/Kiritimati", "Pacific/Pago_Pago"}
	parityOrders = []string{"", "random", "creation-date-asc", "creation-date-desc", "name-asc", "name-desc",
		"creator-id-asc", "creator-id-desc"}
)

// TestSearchParity loads one randomized data set into a bbolt and a
// PostgreSQL store through the Store API, with the same ids and clock,
// and checks that every search answers byte for byte the same on both
// (random order: the same total and a sample of the same matches).
func TestSearchParity(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	bdb := storetest.OpenBolt(t)
	bdb.(*boltdb.DB).Bolt.NoSync = true
	bdb.(*boltdb.DB).Bolt.MaxBatchSize = 1 // one create at a time: no batch delay
	fb := newFixtureOn(t, bdb)
	fp := newFixtureOn(t, storetest.OpenPostgres(t))
	for _, f := range []*fixture{fb, fp} {
		if _, err := f.templates.Put(Template{ID: parityTemplates[2], CollectionID: "S", Title: "T3", Body: "three"}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.templates.Put(Template{ID: parityTemplates[3], CollectionID: "S", Title: "T4", Body: "four"}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	var next uuid.UUID
	fp.store.newID = func() (uuid.UUID, error) { return next, nil }

	word := func() string { return parityWords[rng.IntN(len(parityWords))] }
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var ids []string
	both := func(fn func(f *fixture) error) {
		t.Helper()
		for _, f := range []*fixture{fb, fp} {
			if err := fn(f); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < parityContracts; i++ {
		switch rng.IntN(4) {
		case 0: // same millisecond as the one before: ties
		case 1:
			at = at.Add(time.Duration(rng.IntN(1000)) * time.Millisecond)
		default:
			at = at.Add(time.Duration(rng.IntN(240)) * time.Minute)
		}
		name := word()
		for n := rng.IntN(3); n > 0; n-- {
			name += " " + word()
		}
		nSigners := 1 + rng.IntN(3)
		signers := make([]SignerRequest, nSigners)
		for j := range signers {
			signers[j] = SignerRequest{FullName: word() + " " + word(), AccessKind: "url"}
			if rng.IntN(2) == 0 {
				signers[j].AccessKind = "email"
				signers[j].Email = strings.ToUpper(string(rune('a'+rng.IntN(26)))) + fmt.Sprintf("x%d@Example.com", rng.IntN(50))
			}
		}
		in := &CreateRequest{TemplateID: parityTemplates[rng.IntN(len(parityTemplates))], Name: name, Signers: signers}
		if rng.IntN(3) == 0 {
			exp := at.Add(time.Duration(1+rng.IntN(60*24*20)) * time.Minute).Format(time.RFC3339Nano)
			in.ExpirationTimestamp = &exp
		}
		owner := parityCreators[rng.IntN(len(parityCreators))]
		fb.clock.Set(at)
		fp.clock.Set(at)
		c, err := fb.store.Create(ctx(), owner, in)
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		next = uuid.MustParse(c.ID)
		if _, err := fp.store.Create(ctx(), owner, in); err != nil {
			t.Fatalf("create %d on postgres: %v", i, err)
		}
		ids = append(ids, c.ID)

		// Decisions, archival, deletes, sweeps now and then.
		switch r := rng.IntN(20); {
		case r < 3: // signed or ongoing
			all := r == 0
			both(func(f *fixture) error {
				_, err := f.store.Update(ctx(), c.ID, func(_ storage.Tx, c *Contract) error {
					for k := range c.Signers {
						if all || k == 0 {
							c.Signers[k].Decision, c.Signers[k].DecisionTimestamp = DecisionSigned, at
						}
					}
					return nil
				})
				return err
			})
		case r == 3:
			both(func(f *fixture) error {
				_, err := f.store.Update(ctx(), c.ID, func(_ storage.Tx, c *Contract) error {
					c.Signers[0].Decision, c.Signers[0].DecisionTimestamp = DecisionRejected, at
					return nil
				})
				return err
			})
		case r == 4 || r == 5:
			id := ids[rng.IntN(len(ids))]
			both(func(f *fixture) error { return f.store.Archive(ctx(), id) })
		case r == 6 && len(ids) > 10:
			k := rng.IntN(len(ids))
			id := ids[k]
			ids = slices.Delete(ids, k, k+1)
			both(func(f *fixture) error { return f.store.Delete(ctx(), id) })
		case r == 7:
			both(func(f *fixture) error { _, err := f.store.SweepExpired(ctx(), 5); return err })
		}
	}
	t.Logf("loaded in %v", time.Since(start))
	start = time.Now()
	// Searches run a while after the last create: many contracts have
	// expired without the sweeper writing it down.
	end := at.Add(5 * 24 * time.Hour)
	fb.clock.Set(end)
	fp.clock.Set(end)

	dates := func() string {
		d := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.IntN(int(end.Sub(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)).Hours()/24)+1)) * 24 * time.Hour)
		return d.Format(time.DateOnly)
	}
	pick := func(list []string) string { return list[rng.IntN(len(list))] }
	statusNames := []string{"sent", "ongoing", "rejected", "signed", "expired"}
	compared, randoms := 0, 0
	for i := 0; i < parityQueries; i++ {
		v := url.Values{}
		if rng.IntN(3) == 0 {
			v.Set("template-id", pick(append([]string{"NOPE"}, parityTemplates...)))
		}
		if rng.IntN(3) == 0 {
			v.Set("creator-id", pick(append([]string{"nobody"}, parityCreators...)))
		}
		if rng.IntN(3) == 0 {
			if rng.IntN(6) == 0 {
				v.Set("statuses", "any")
			} else {
				var sts []string
				for _, st := range statusNames {
					if rng.IntN(3) == 0 {
						sts = append(sts, st)
					}
				}
				if len(sts) == 0 {
					sts = append(sts, pick(statusNames))
				}
				v.Set("statuses", strings.Join(sts, "|"))
			}
		}
		if rng.IntN(3) == 0 {
			w := []rune(word())
			a := rng.IntN(len(w))
			b := a + 1 + rng.IntN(len(w)-a)
			v.Set("substring", string(w[a:b]))
		}
		if rng.IntN(3) == 0 {
			v.Set("placement", pick([]string{"any", "stacked", "archived"}))
		}
		if rng.IntN(3) == 0 {
			switch rng.IntN(4) {
			case 0:
				v.Set("date-range", dates())
			case 1:
				v.Set("date-range", dates()+"~")
			case 2:
				v.Set("date-range", "~"+dates())
			default:
				a, b := dates(), dates()
				if b < a {
					a, b = b, a
				}
				v.Set("date-range", a+"~"+b)
			}
			if z := pick(parityZones); z != "" {
				v.Set("time-zone", z)
			}
		}
		order := pick(parityOrders)
		if order != "" {
			v.Set("order", order)
		}
		if rng.IntN(2) == 0 {
			v.Set("page-size", fmt.Sprint(1+rng.IntN(100)))
		}
		if rng.IntN(2) == 0 {
			v.Set("page", fmt.Sprint(1+rng.IntN(4)))
		}
		// Each way PostgreSQL finds a substring search's page, taken in
		// turn: the matches collected with their count, counted apart
		// and the page found walking an index, or collected and sorted.
		way := [][2]int{{1000, 5000}, {0, 1 << 30}, {0, 0}}[i%3]
		pgb := fp.backend.(*PostgresBackend)
		pgb.maxCollected, pgb.maxOrderedWalk = way[0], way[1]
		target := Prefix + "?" + v.Encode()
		wb := fb.do(alice, http.MethodGet, target, "")
		wp := fp.do(alice, http.MethodGet, target, "")
		if wb.Code != http.StatusOK {
			t.Fatalf("%s: bolt answers %d %s", target, wb.Code, wb.Body)
		}
		if order != "" && order != "random" {
			if wb.Code != wp.Code || wb.Body.String() != wp.Body.String() {
				t.Fatalf("%s:\nbolt     %d %s\npostgres %d %s", target, wb.Code, wb.Body, wp.Code, wp.Body)
			}
			compared++
			continue
		}
		// Random: the same total, a page-size sample of the matches.
		randoms++
		pb, pp := decodeSearchPage(t, wb.Body.Bytes()), decodeSearchPage(t, wp.Body.Bytes())
		if pb.TotalCount != pp.TotalCount || len(pb.Contracts) != len(pp.Contracts) {
			t.Fatalf("%s: bolt %d matches (%d shown), postgres %d (%d shown)", target, pb.TotalCount, len(pb.Contracts), pp.TotalCount, len(pp.Contracts))
		}
		v.Set("order", "creation-date-asc")
		v.Set("page-size", "100")
		matches := map[string]string{}
		for page := 1; len(matches) < pb.TotalCount; page++ {
			v.Set("page", fmt.Sprint(page))
			all := decodeSearchPage(t, fb.do(alice, http.MethodGet, Prefix+"?"+v.Encode(), "").Body.Bytes())
			if len(all.Contracts) == 0 {
				t.Fatalf("%s: listing the %d matches ended early", target, pb.TotalCount)
			}
			for _, c := range all.Contracts {
				raw, _ := json.Marshal(c)
				matches[c["id"].(string)] = string(raw)
			}
		}
		seen := map[string]bool{}
		for _, c := range pp.Contracts {
			id := c["id"].(string)
			raw, _ := json.Marshal(c)
			if matches[id] != string(raw) || seen[id] {
				t.Fatalf("%s: postgres sample holds %s, not a match as bolt shows it (or twice)", target, raw)
			}
			seen[id] = true
		}
	}
	t.Logf("searched in %v", time.Since(start))
	t.Logf("%d contracts, %d searches compared byte for byte, %d random ones as samples", len(ids), compared, randoms)
}

type searchPageBody struct {
	TotalCount int              `json:"totalCount"`
	Contracts  []map[string]any `json:"contracts"`
}

func decodeSearchPage(t *testing.T, b []byte) searchPageBody {
	t.Helper()
	var p searchPageBody
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return p
}
