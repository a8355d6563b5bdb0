package keyimport

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/keystore/traffic"
)

// kongTwoKeys is a decK dump of one consumer with two key-auth
// credentials whose rate-limiting plugin allows 5 a second and 12 a
// month.
const kongTwoKeys = `_format_version: "3.0"
consumers:
- username: acme
  custom_id: crm-7
  keyauth_credentials:
  - key: acme-first-key-0123456789ab
  - key: acme-second-key-0123456789a
  acls:
  - group: readers
  plugins:
  - name: rate-limiting
    config: {second: 5, month: 12, policy: local}
`

// importKong parses dump with the tests' privileges map and imports it.
func importKong(t *testing.T, k *keystore.Keys, dump string, dryRun bool) (keystore.ImportReport, error) {
	t.Helper()
	set, err := ParseKong([]byte(dump), testGrants, "", t0)
	return k.Import(set, dryRun, err)
}

// TestImportKongConsumer: a decK consumer with two credentials becomes
// one consumer (custom_id as externalId) holding two keys, its limits
// on the consumer alone: alternating the two tokens within one second
// lets through the consumer's 5, as Kong did, not 5 a key, and its
// monthly quota is counted once for both. A dry run reports the same
// and stores nothing.
func TestImportKongConsumer(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		dry, err := importKong(t, e.keys, kongTwoKeys, true)
		if err != nil {
			t.Fatal(err)
		}
		if !dry.DryRun || dry.Imported != 2 || len(dry.Consumers) != 1 || dry.Consumers[0].Keys != 2 || dry.Consumers[0].Existing ||
			dry.Consumers[0].ExternalID == nil || *dry.Consumers[0].ExternalID != "crm-7" || len(dry.Plans) != 0 {
			t.Fatalf("dry run: %+v", dry)
		}
		if len(e.keys.ListConsumers()) != 0 || len(e.keys.List("")) != 0 || len(e.reopen(t).ListConsumers()) != 0 {
			t.Fatal("a dry run stored something")
		}

		report, err := importKong(t, e.keys, kongTwoKeys, false)
		if err != nil {
			t.Fatal(err)
		}
		if report.DryRun || len(report.Consumers) != 1 || len(report.Keys) != 2 {
			t.Fatalf("import: %+v", report)
		}
		rc := report.Consumers[0]
		for _, k := range report.Keys {
			if k.ConsumerID == nil || *k.ConsumerID != rc.ID {
				t.Errorf("reported key %s: consumer %v, want %s", k.Name, k.ConsumerID, rc.ID)
			}
		}
		for _, keys := range []*keystore.Keys{e.keys, e.reopen(t)} {
			list := keys.ListConsumers()
			if len(list) != 1 {
				t.Fatalf("%d consumers, want 1", len(list))
			}
			c := list[0]
			if c.ID != rc.ID || c.Name != "acme" || c.ExternalID == nil || *c.ExternalID != "crm-7" || c.KeyCount != 2 ||
				len(c.RateLimits) != 1 || c.RateLimits[0] != (traffic.RateLimit{Name: "second", Limit: 5, WindowSeconds: 1}) ||
				c.Quota == nil || *c.Quota != (traffic.Quota{Limit: 12, Period: traffic.QuotaMonth}) {
				t.Errorf("consumer %+v", c)
			}
			var names []string
			for _, k := range keys.List("") {
				names = append(names, k.Name)
				if k.ConsumerID == nil || *k.ConsumerID != c.ID || len(k.RateLimits) != 0 || k.Quota != nil {
					t.Errorf("key %s: consumer %v, limits %v, quota %v; want the consumer's and none of its own", k.Name, k.ConsumerID, k.RateLimits, k.Quota)
				}
			}
			// Made at one instant, listed by name.
			if !slices.Equal(names, []string{"acme #1", "acme #2"}) {
				t.Errorf("the keys listed as %v", names)
			}
		}

		tokens := []string{"acme-first-key-0123456789ab", "acme-second-key-0123456789a"}
		now := e.clock.Now()
		through := 0
		for i := range 14 {
			if d := checkAt(e.keys, tokens[i%2], now.Add(time.Duration(i)*30*time.Millisecond)); d.Authorized() {
				through++
			} else if !slices.Equal(d.Violated, []string{"consumer:second"}) {
				t.Errorf("refused by %v, want the consumer's second", d.Violated)
			}
		}
		if through != 5 {
			t.Errorf("%d let through in half a second alternating two keys, want the consumer's 5", through)
		}
		// The month's 12 over both keys: 5 spent, 7 left.
		spent := through
		for i := range 30 {
			d := checkAt(e.keys, tokens[i%2], now.Add(time.Duration(2+i)*time.Second))
			switch {
			case d.Authorized():
				spent++
			case d.Reason != problem.CodeQuotaExceeded || !slices.Equal(d.Violated, []string{"consumer:quota"}):
				t.Errorf("refused %s %v, want the consumer's quota", d.Reason, d.Violated)
			}
		}
		if spent != 12 {
			t.Errorf("%d spent over two keys, want the consumer's quota of 12", spent)
		}
		if err := e.keys.ReadQuotas(rc.ID); err != nil {
			t.Fatal(err)
		}
		if c, _ := e.keys.GetConsumer(rc.ID); c.QuotaUsed == nil || *c.QuotaUsed != 12 {
			t.Errorf("the consumer's quota used: %v, want 12", c.QuotaUsed)
		}
	})
}

// kongGroups is a dump of consumer groups: gold (rate-limiting-advanced,
// 3 a minute, nested) with alpha by its consumers list and beta by its
// groups, and gamma, whose own rate-limiting-advanced overrides gold's;
// silver (rate-limiting by a top-level plugin), whose delta has a
// rate-limiting of its own beside; bronze, without limits.
const kongGroupsDump = `_format_version: "3.0"
consumer_groups:
- name: gold
  consumers:
  - username: alpha
  plugins:
  - name: rate-limiting-advanced
    config: {limit: [3], window_size: [60], window_type: sliding, namespace: gold}
- name: silver
- name: bronze
consumers:
- username: alpha
  keyauth_credentials:
  - key: alpha-key-0123456789abcdef
  acls: [{group: readers}]
- username: beta
  custom_id: crm-beta
  groups: [{name: gold}, {name: bronze}]
  keyauth_credentials:
  - key: beta-key-0123456789abcdef
  acls: [{group: readers}]
- username: gamma
  groups: [{name: gold}]
  keyauth_credentials:
  - key: gamma-key-0123456789abcdef
  acls: [{group: readers}]
  plugins:
  - name: rate-limiting-advanced
    config: {limit: [100], window_size: [60]}
- username: delta
  groups: [{name: silver}]
  keyauth_credentials:
  - key: delta-key-0123456789abcdef
  acls: [{group: readers}]
  plugins:
  - name: rate-limiting-advanced
    config: {limit: [50], window_size: [3600], identifier: credential}
plugins:
- name: rate-limiting
  consumer_group: silver
  config: {minute: 2, month: 1000}
- name: rate-limiting
  config: {second: 1}
`

// TestImportKongGroups: a consumer group with limits becomes a plan of
// its name that its consumers take, each counted apart, as Kong counts
// a group's plugin by consumer; a consumer whose own plugin overrides
// the group's takes no plan, as on Kong, and the report says why; a
// group without limits is no plan. The global rate-limiting applies,
// as the consumer's own, to each consumer that has none of its own or
// its group's (a rate-limiting-advanced is another plugin), and a
// limit by credential goes on each key.
func TestImportKongGroups(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		report, err := importKong(t, e.keys, kongGroupsDump, false)
		if err != nil {
			t.Fatal(err)
		}
		plans := map[string]keystore.Plan{}
		for _, p := range e.reopen(t).ListPlans() {
			plans[p.Name] = p
		}
		gold, silver := plans["gold"], plans["silver"]
		if len(plans) != 2 || !slices.Equal(gold.RateLimits, []traffic.RateLimit{{Name: "rla-60s", Limit: 3, WindowSeconds: 60}}) || gold.Quota != nil ||
			!slices.Equal(silver.RateLimits, []traffic.RateLimit{{Name: "minute", Limit: 2, WindowSeconds: 60}}) || silver.Quota == nil || silver.Quota.Limit != 1000 {
			t.Fatalf("plans %+v", plans)
		}
		if len(report.Plans) != 2 || report.Plans[0].Name != "gold" || report.Plans[0].Consumers != 2 || report.Plans[0].Line != 3 ||
			report.Plans[1].Name != "silver" || report.Plans[1].Consumers != 1 {
			t.Errorf("reported plans %+v", report.Plans)
		}
		byName := map[string]keystore.ImportedConsumer{}
		for _, c := range report.Consumers {
			byName[c.Name] = c
		}
		for name, want := range map[string]*string{"alpha": &gold.ID, "beta": &gold.ID, "gamma": nil, "delta": &silver.ID} {
			c := byName[name]
			if !sameID(c.PlanID, want) {
				t.Errorf("consumer %s: plan %v, want %v", name, c.PlanID, want)
			}
			stored, err := e.keys.GetConsumer(c.ID)
			if err != nil || !sameID(stored.PlanID, want) {
				t.Errorf("stored consumer %s: %+v %v", name, stored, err)
			}
		}
		if note := byName["gamma"].Note; !strings.Contains(note, "rate-limiting-advanced overrides consumer group gold") {
			t.Errorf("gamma's note %q", note)
		}
		global := traffic.RateLimit{Name: "second", Limit: 1, WindowSeconds: 1}
		for name, want := range map[string][]traffic.RateLimit{
			"alpha": {global},
			"beta":  {global},
			"gamma": {{Name: "rla-60s", Limit: 100, WindowSeconds: 60}, global},
			// silver's rate-limiting overrides the global one; delta's
			// own rate-limiting-advanced counts by credential.
			"delta": {},
		} {
			if c, _ := e.keys.GetConsumer(byName[name].ID); !slices.Equal(c.RateLimits, want) || c.Quota != nil {
				t.Errorf("%s's own limits %v %v, want %v", name, c.RateLimits, c.Quota, want)
			}
		}
		for _, k := range e.keys.List("") {
			want := []traffic.RateLimit{}
			if k.Name == "delta" {
				want = []traffic.RateLimit{{Name: "rla-3600s", Limit: 50, WindowSeconds: 3600}}
			}
			if !slices.Equal(k.RateLimits, want) {
				t.Errorf("key %s: limits %v, want %v", k.Name, k.RateLimits, want)
			}
		}

		// gold's 3 a minute for alpha, and again for beta: a plan counts
		// each consumer apart.
		now := e.clock.Now()
		for _, token := range []string{"alpha-key-0123456789abcdef", "beta-key-0123456789abcdef"} {
			through := 0
			for i := range 5 {
				if d := checkAt(e.keys, token, now.Add(time.Duration(i)*2*time.Second)); d.Authorized() {
					through++
				} else if !slices.Equal(d.Violated, []string{"consumer:rla-60s"}) {
					t.Errorf("%s refused by %v", token[:5], d.Violated)
				}
			}
			if through != 3 {
				t.Errorf("%s: %d let through in a minute, want gold's 3", token[:5], through)
			}
		}
	})
}

// TestParseKongGroups: what of consumer groups cannot be imported is a
// problem at its line, with the rest of the dump's.
func TestParseKongGroups(t *testing.T) {
	consumer := func(extra string) string {
		return "consumers:\n- username: c\n  keyauth_credentials:\n  - key: c-key-0123456789abcdef\n  acls: [{group: readers}]\n" + extra
	}
	tests := []struct {
		name, dump string
		errs       []string
		// says is in the problems' messages.
		says string
	}{
		{
			name: "two groups with limits",
			dump: consumer("  groups: [{name: a}, {name: b}]\nplugins:\n- {name: rate-limiting, consumer_group: a, config: {minute: 1}}\n- {name: rate-limiting, consumer_group: b, config: {minute: 2}}\n"),
			errs: []string{"lines[2].groups:two_groups"}, says: "a, b",
		},
		{
			name: "one of two plugins of the group overridden",
			dump: consumer("  groups: [{name: g}]\n  plugins: [{name: rate-limiting, config: {minute: 9}}]\nconsumer_groups:\n- name: g\n  plugins:\n  - {name: rate-limiting, config: {minute: 1}}\n  - {name: rate-limiting-advanced, config: {limit: [5], window_size: [10]}}\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "but not its rate-limiting-advanced",
		},
		{
			name: "a group's limit by credential",
			dump: consumer("  groups: [{name: g}]\nconsumer_groups:\n- name: g\n  plugins: [{name: rate-limiting, config: {minute: 1, limit_by: credential}}]\n"),
			errs: []string{"lines[8].plugins:unmapped"}, says: "consumer group g: a limit by credential",
		},
		{
			name: "a group's limit by ip",
			dump: consumer("consumer_groups:\n- name: g\n  consumers: [{username: c}]\n  plugins: [{name: rate-limiting-advanced, config: {limit: [1], window_size: [1], identifier: ip}}]\n"),
			errs: []string{"lines[7].plugins:unmapped"}, says: "limits by ip",
		},
		{
			name: "a window beyond a day",
			dump: consumer("  plugins: [{name: rate-limiting-advanced, config: {limit: [1], window_size: [2592000]}}]\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "2592000 seconds",
		},
		{
			name: "another plugin of a group",
			dump: consumer("  groups: [{name: g}]\nconsumer_groups:\n- name: g\n  plugins: [{name: request-transformer, config: {}}]\n"),
			errs: []string{"lines[8].plugins:unmapped"}, says: "request-transformer",
		},
		{
			name: "a group listed twice",
			dump: consumer("consumer_groups:\n- name: g\n- name: g\n"),
			errs: []string{"lines[8].name:duplicate"}, says: "line 7",
		},
		{
			name: "a group's acl plugin denying a group of the consumer",
			dump: consumer("  groups: [{name: g}]\nconsumer_groups:\n- name: g\n  plugins: [{name: acl, config: {deny: [readers]}}]\n"),
			errs: []string{"lines[2].acls:denied"}, says: "consumer group g",
		},
		{
			name: "a fractional limit",
			dump: consumer("  plugins: [{name: rate-limiting, config: {minute: 5.5}}]\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "minute is 5.5, not a positive whole number",
		},
		{
			name: "a limit as a string",
			dump: consumer("  plugins: [{name: rate-limiting, config: {hour: \"100\"}}]\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "hour is 100, not a positive whole number",
		},
		{
			name: "a zero day beside a minute",
			dump: consumer("  plugins: [{name: rate-limiting, config: {minute: 10, day: 0}}]\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "day is 0",
		},
		{
			name: "a negative month quota",
			dump: consumer("  plugins: [{name: rate-limiting, config: {month: -1}}]\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "month is -1",
		},
		{
			name: "a group's fractional limit",
			dump: consumer("  groups: [{name: g}]\nconsumer_groups:\n- name: g\n  plugins: [{name: rate-limiting, config: {minute: 5.5}}]\n"),
			errs: []string{"lines[8].plugins:unmapped"}, says: "minute is 5.5",
		},
		{
			name: "a yearly limit as a string",
			dump: consumer("  plugins: [{name: rate-limiting, config: {year: \"1000\"}}]\n"),
			errs: []string{"lines[2].plugins:unmapped"}, says: "yearly",
		},
		{
			name: "a null limit is no limit",
			dump: consumer("  plugins: [{name: rate-limiting, config: {minute: null}}]\n"),
		},
		{
			name: "a group without limits",
			dump: consumer("  groups: [{name: g}]\nconsumer_groups:\n- name: g\n"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := ParseKong([]byte(tt.dump), testGrants, "", t0)
			if tt.errs == nil {
				if err != nil || len(set.Consumers) != 1 || len(set.Plans) != 0 || set.Consumers[0].Plan != 0 {
					t.Errorf("%v: consumers %+v, plans %+v", err, set.Consumers, set.Plans)
				}
				return
			}
			if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, tt.errs) {
				t.Errorf("errors %v, want %v\n%s", got, tt.errs, problemText(err))
			}
			if !strings.Contains(problemText(err), tt.says) {
				t.Errorf("no problem says %q:\n%s", tt.says, problemText(err))
			}
		})
	}
}

// TestImportKongExisting: a second dump whose consumer (by custom_id)
// and group (by name) are stored already, with the same limits, gives
// its keys to them and changes neither; with other limits, or a
// custom_id twice, it is refused naming each, and stores nothing.
func TestImportKongExisting(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		dump := func(token, limit string) string {
			return fmt.Sprintf(`consumer_groups:
- name: gold
  plugins: [{name: rate-limiting, config: {minute: %s}}]
consumers:
- username: acme
  custom_id: crm-7
  groups: [{name: gold}]
  keyauth_credentials:
  - key: %s
  acls: [{group: readers}]
`, limit, token)
		}
		first, err := importKong(t, e.keys, dump("acme-first-token-0123456789", "10"), false)
		if err != nil {
			t.Fatal(err)
		}
		second, err := importKong(t, e.keys, dump("acme-second-token-012345678", "10"), false)
		if err != nil {
			t.Fatal(err)
		}
		if !second.Consumers[0].Existing || second.Consumers[0].ID != first.Consumers[0].ID || !second.Plans[0].Existing ||
			second.Plans[0].ID != first.Plans[0].ID || second.Plans[0].Consumers != 1 {
			t.Fatalf("second import: %+v", second)
		}
		re := e.reopen(t)
		if c, err := re.GetConsumer(first.Consumers[0].ID); err != nil || c.KeyCount != 2 || len(re.ListConsumers()) != 1 || len(re.ListPlans()) != 1 {
			t.Errorf("after two imports: %+v %v, %d consumers, %d plans", c, err, len(re.ListConsumers()), len(re.ListPlans()))
		}

		// Other limits: the plan and the consumer (whose plan would be
		// another) are named, and nothing is stored.
		before := len(e.stored(t))
		_, err = importKong(t, e.keys, dump("acme-third-token-0123456789", "20"), false)
		if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, []string{"lines[2].name:exists"}) {
			t.Errorf("other limits: %v", got)
		}
		twice := dump("acme-fourth-token-012345678", "10") + `- username: again
  custom_id: crm-7
  keyauth_credentials:
  - key: again-token-0123456789abc
  acls: [{group: readers}]
`
		_, err = importKong(t, e.keys, twice, false)
		if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, []string{"lines[11].externalId:duplicate"}) {
			t.Errorf("a custom_id twice: %v", got)
		}
		_, err = importKong(t, e.keys, strings.Replace(dump("acme-fifth-token-0123456789", "10"), "groups: [{name: gold}]", "groups: []", 1), false)
		if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, []string{"lines[5].externalId:exists"}) || !strings.Contains(problemText(err), first.Consumers[0].ID) {
			t.Errorf("the consumer with another plan: %v\n%s", got, problemText(err))
		}
		if n := len(e.stored(t)); n != before || len(e.reopen(t).ListConsumers()) != 1 {
			t.Errorf("a refused import stored something: %d records, was %d", n, before)
		}
	})
}

// TestImportJSONLScopes: a line of JSON Lines may put its key under a
// stored consumer and plan; one naming none is a problem at its line.
func TestImportJSONLScopes(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		c := mustConsumer(t, e.keys, `{"name":"acme","rateLimits":[{"name":"second","limit":1,"windowSeconds":1}]}`)
		p := mustPlan(t, e.keys, `{"name":"basic","rateLimits":[{"name":"minute","limit":5,"windowSeconds":60}]}`)
		file := `{"service":"contracts","name":"a","owner":"o","privileges":["get"],"token":"jsonl-scoped-token-0123","consumerId":"` + c.ID + `","planId":"` + p.ID + `"}
{"service":"contracts","name":"b","owner":"o","privileges":["get"],"consumerId":"0b6f3a4e-2f60-4c55-9a55-4f4f3d3f8a11"}
{"service":"contracts","name":"c","owner":"o","privileges":["get"],"planId":"` + p.ID + `","rateLimits":[{"name":"minute","limit":1,"windowSeconds":60}]}`
		keys, err := ParseJSONL([]byte(file), "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil)
		if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, []string{"lines[2].consumerId:unknown", "lines[3].rateLimits[0].name:clashes"}) {
			t.Errorf("errors %v", got)
		}
		// Two short values some way apart are each said back, and the
		// words between them stay.
		if says := `policy "minute" is named by plan "basic" too`; !strings.Contains(problemText(err), says) {
			t.Errorf("no problem says %s:\n%s", says, problemText(err))
		}
		report, err := e.keys.Import(keystore.ImportSet{Keys: keys[:1]}, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if k := report.Keys[0]; k.ConsumerID == nil || *k.ConsumerID != c.ID {
			t.Errorf("reported key %+v", k)
		}
		if g, _ := e.reopen(t).GetConsumer(c.ID); g.KeyCount != 1 {
			t.Errorf("the consumer holds %d keys", g.KeyCount)
		}
		now := e.clock.Now()
		if d := checkAt(e.keys, "jsonl-scoped-token-0123", now); !d.Authorized() {
			t.Fatalf("refused: %s", d.Reason)
		}
		if d := checkAt(e.keys, "jsonl-scoped-token-0123", now); !slices.Equal(d.Violated, []string{"consumer:second"}) {
			t.Errorf("second request refused by %v, want the consumer's second", d.Violated)
		}
	})
}

// TestImportKongRace: a plan name or externalId that another instance
// stored after this one last read them fails the whole import in its
// transaction with the 409 of a create, storing nothing.
func TestImportKongRace(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		other := e.reopen(t)
		mustPlan(t, other, `{"name":"gold"}`)
		group := `consumer_groups:
- name: gold
  plugins: [{name: rate-limiting-advanced, config: {limit: [10], window_size: [60]}}]
` + strings.Replace(strings.Replace(kongTwoKeys, `_format_version: "3.0"`+"\n", "", 1), "  custom_id: crm-7\n", "  groups: [{name: gold}]\n", 1)
		if _, err := importKong(t, e.keys, group, false); err != keystore.ErrPlanNameTaken {
			t.Errorf("a plan name taken meanwhile: %v", err)
		}
		mustConsumer(t, other, `{"name":"there","externalId":"crm-7"}`)
		if _, err := importKong(t, e.keys, kongTwoKeys, false); err != keystore.ErrExternalIDTaken {
			t.Errorf("an externalId taken meanwhile: %v", err)
		}
		re := e.reopen(t)
		if len(re.List("")) != 0 || len(re.ListConsumers()) != 1 || len(re.ListPlans()) != 1 {
			t.Errorf("a failed import stored something: %d keys, %d consumers, %d plans", len(re.List("")), len(re.ListConsumers()), len(re.ListPlans()))
		}
		if works(e.keys, access.ServiceContracts, "acme-first-key-0123456789ab") {
			t.Error("a failed import's token works")
		}
	})
}

// TestImportKongReachesOtherInstance: a decK import's consumer and its
// keys reach another instance following the same PostgreSQL with the
// one notification of the import, the consumer's limits binding both
// keys there too.
func TestImportKongReachesOtherInstance(t *testing.T) {
	e := newEnv(t, storetest.OpenPostgres(t))
	other := followingInstance(t, e)
	first := mustCreate(t, e.keys, `{`+validContracts+`}`)
	testwait.For(t, testwait.Generous, "the other instance to listen", func() bool { return other.Lookup(token.HashOf(first.Token)) != nil })
	if _, err := importKong(t, e.keys, kongTwoKeys, false); err != nil {
		t.Fatal(err)
	}
	tokens := []string{"acme-first-key-0123456789ab", "acme-second-key-0123456789a"}
	testwait.For(t, time.Second, "the imported keys on the other instance", func() bool {
		return works(other, access.ServiceContracts, tokens[0]) && works(other, access.ServiceContracts, tokens[1])
	})
	// Past the second the probes above spent in.
	later := e.clock.Now().Add(10 * time.Second)
	through := 0
	for i := range 10 {
		if d := checkAt(other, tokens[i%2], later); d.Authorized() {
			through++
		}
	}
	if through != 5 {
		t.Errorf("%d let through on the other instance alternating the two keys, want the consumer's 5", through)
	}
}
