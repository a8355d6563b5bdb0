package command_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/keygate/keygate/keystore"
)

// TestConsumersCommandLine runs `caddy webapi consumers`, `plans` and
// the keys' --consumer and --plan as an administrator does: each command's
// output and what the gateway stored after it; bad input printed with
// the problem's field and message, an error, and nothing changed.
func TestConsumersCommandLine(t *testing.T) {
	cliGateway(t, t.TempDir(), "ok")
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$`)
	// run runs the CLI, which must succeed, and returns what it printed.
	run := func(t *testing.T, args ...string) string {
		t.Helper()
		out, _, err := runCLI(t, args...)
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		return out
	}
	// created runs a create that prints the new id alone.
	created := func(t *testing.T, args ...string) string {
		t.Helper()
		out := run(t, args...)
		if !uuid.MatchString(out) {
			t.Fatalf("%s printed %q, want the id alone", strings.Join(args, " "), out)
		}
		return strings.TrimSpace(out)
	}
	// contains fails unless out holds every line of want, as a regular
	// expression on a whole line.
	contains := func(t *testing.T, what, out string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !regexp.MustCompile(`(?m)^` + w + `$`).MatchString(out) {
				t.Errorf("%s lacks a line %q:\n%s", what, w, out)
			}
		}
	}

	pid := created(t, "plans", "create", "--name", "basic", "--description", "the entry plan", "--rate-limit", "burst=50/1m")
	var plan keystore.Plan
	adminGet(t, "/webapi/plans/"+pid, &plan)
	if plan.Name != "basic" || plan.Description != "the entry plan" || len(plan.RateLimits) != 1 || plan.RateLimits[0].WindowSeconds != 60 || plan.Quota != nil {
		t.Fatalf("stored plan %+v", plan)
	}
	contains(t, "plans list", run(t, "plans", "list"), `ID\s+NAME\s+RATE LIMITS\s+QUOTA\s*`, pid+`\s+basic\s+burst=50/1m\s+-\s*`)
	contains(t, "plans show", run(t, "plans", "show", pid),
		`id:\s+`+pid, `name:\s+basic`, `description:\s+the entry plan`, `rate limits:\s+burst=50/1m`, `quota:\s+-`)

	cid := created(t, "consumers", "create", "--name", "ACME", "--external-id", "acme-1", "--plan", pid,
		"--rate-limit", "minute=3/1m", "--quota", "1000/day")
	var consumer keystore.Consumer
	adminGet(t, "/webapi/consumers/"+cid, &consumer)
	if consumer.Name != "ACME" || consumer.ExternalID == nil || *consumer.ExternalID != "acme-1" || consumer.PlanID == nil || *consumer.PlanID != pid ||
		len(consumer.RateLimits) != 1 || consumer.RateLimits[0].Limit != 3 || consumer.Quota == nil || consumer.Quota.Period != "day" {
		t.Fatalf("stored consumer %+v", consumer)
	}

	// Two keys of the consumer, the first on the plan too, and one of no
	// consumer.
	kid := keyOf(t, run(t, "keys", "create", "--service", "contracts", "--name", "a", "--owner", "alice", "--privileges", "get",
		"--consumer", cid, "--plan", pid, "--json")).ID
	var key keystore.Key
	adminGet(t, "/webapi/keys/"+kid, &key)
	if key.ConsumerID == nil || *key.ConsumerID != cid || key.PlanID == nil || *key.PlanID != pid {
		t.Fatalf("stored key %+v", key)
	}
	second := keyOf(t, run(t, "keys", "create", "--service", "contracts", "--name", "b", "--owner", "alice", "--privileges", "get", "--consumer", cid, "--json"))
	other := keyOf(t, run(t, "keys", "create", "--service", "contracts", "--name", "c", "--owner", "bob", "--privileges", "get", "--json")).ID

	contains(t, "consumers list", run(t, "consumers", "list"),
		`ID\s+NAME\s+EXTERNAL ID\s+PLAN\s+KEYS\s+RATE LIMITS\s+QUOTA\s*`,
		cid+`\s+ACME\s+acme-1\s+basic\s+2\s+minute=3/1m\s+1000/day, 0 used, resets \S+\s*`)
	contains(t, "consumers show", run(t, "consumers", "show", cid),
		`name:\s+ACME`, `external id:\s+acme-1`, `plan:\s+`+pid+` \(basic: burst=50/1m, quota -\)`, `rate limits:\s+minute=3/1m`, `keys:\s+2`)
	// A description's further lines stand under its first, never at the
	// margin where they would read as rows of their own.
	run(t, "consumers", "update", cid, "--description", "legit\nquota:        unlimited\r\n\tkeys: 0")
	shown := run(t, "consumers", "show", cid)
	if regexp.MustCompile(`(?m)^(quota|keys):\s+(unlimited|0)`).MatchString(shown) ||
		!regexp.MustCompile(`(?m)^description:\s+legit\n\s+quota:        unlimited\n\s+ keys: 0\n`).MatchString(shown) {
		t.Errorf("consumers show of a description in three lines:\n%s", shown)
	}
	run(t, "consumers", "update", cid, "--description", "")
	list := run(t, "keys", "list", "--consumer", cid)
	if strings.Count(list, "\n") != 3 || !strings.Contains(list, kid) || strings.Contains(list, other) {
		t.Errorf("keys list --consumer: want its two keys:\n%s", list)
	}
	if list := run(t, "keys", "list", "--plan", pid); strings.Count(list, "\n") != 2 || !strings.Contains(list, kid) {
		t.Errorf("keys list --plan: want the one key that takes it:\n%s", list)
	}
	contains(t, "keys show", run(t, "keys", "show", kid), `consumer:\s+`+cid+` \(ACME\)`, `plan:\s+`+pid+` \(basic: burst=50/1m, quota -\)`)
	contains(t, "keys show of no consumer", run(t, "keys", "show", other), `consumer:\s+-`, `plan:\s+-`)

	// A use of the second key counts under the consumer.
	useKey(t, second.Token)
	contains(t, "consumers usage", run(t, "consumers", "usage", cid, "--resolution", "day"), `total\s+1\s+0\s*`)
	var series keystore.UsageSeries
	if err := json.Unmarshal([]byte(run(t, "consumers", "usage", cid, "--json")), &series); err != nil || series.ConsumerID != cid {
		t.Errorf("consumers usage --json: %v %+v", err, series)
	}

	// Updates set what they name; none clears.
	contains(t, "keys update", run(t, "keys", "update", kid, "--plan", "none"), `plan:\s+-`, `consumer:\s+`+cid+` \(ACME\)`)
	adminGet(t, "/webapi/keys/"+kid, &key)
	if key.PlanID != nil || key.ConsumerID == nil {
		t.Errorf("after keys update --plan none: %+v", key)
	}
	run(t, "keys", "update", other, "--consumer", cid, "--plan", pid)
	adminGet(t, "/webapi/keys/"+other, &key)
	if key.ConsumerID == nil || *key.ConsumerID != cid || key.PlanID == nil || *key.PlanID != pid {
		t.Errorf("after keys update --consumer --plan: %+v", key)
	}
	run(t, "keys", "update", other, "--consumer", "none", "--plan", "")
	adminGet(t, "/webapi/keys/"+other, &key)
	if key.ConsumerID != nil || key.PlanID != nil {
		t.Errorf("after keys update --consumer none --plan '': %+v", key)
	}
	out := run(t, "consumers", "update", cid, "--plan", "none", "--external-id", "none", "--quota", "none", "--description", "a client", "--json")
	consumer = keystore.Consumer{}
	if err := json.Unmarshal([]byte(out), &consumer); err != nil || consumer.PlanID != nil || consumer.ExternalID != nil || consumer.Quota != nil ||
		consumer.Description != "a client" || consumer.Name != "ACME" || len(consumer.RateLimits) != 1 {
		t.Errorf("consumers update --json: %v\n%s", err, out)
	}
	contains(t, "consumers update", run(t, "consumers", "update", cid, "--plan", pid, "--name", "ACME Corp"),
		`name:\s+ACME Corp`, `plan:\s+`+pid+` \(basic: burst=50/1m, quota -\)`, `external id:\s+-`, `quota:\s+-`, `description:\s+a client`)
	contains(t, "plans update", run(t, "plans", "update", pid, "--quota", "500/hour", "--rate-limit", "none"),
		`name:\s+basic`, `rate limits:\s+-`, `quota:\s+500/hour`)
	adminGet(t, "/webapi/plans/"+pid, &plan)
	if plan.Quota == nil || plan.Quota.Limit != 500 || plan.Quota.Period != "hour" || len(plan.RateLimits) != 0 {
		t.Errorf("stored plan after update %+v", plan)
	}
	contains(t, "consumers show on the plan's quota", run(t, "consumers", "show", cid), `quota:\s+the plan's 500/hour, \d+ used, resets \S+`, `plan:\s+`+pid+` \(basic: -, quota 500/hour\)`)
	contains(t, "consumers list on the plan's quota", run(t, "consumers", "list"), cid+`\s+ACME Corp\s+-\s+basic\s+2\s+minute=3/1m\s+the plan's 500/hour, \d+ used, resets \S+`)
	run(t, "plans", "update", pid, "--rate-limit", "burst=50/1m")

	// Bad input: an error naming the field and saying why, nothing stored.
	run(t, "consumers", "update", cid, "--external-id", "acme-2")
	const unknown = "9b2f2a64-7a4e-4d0a-9a57-0a3c4c2e9d11"
	bad := []struct {
		name string
		args []string
		want []string // in the error, each
	}{
		{"unknown plan", []string{"consumers", "create", "--name", "x", "--plan", unknown},
			[]string{"(invalid_request)", "\n  planId: no plan has this id"}},
		{"unknown plan of a key", []string{"keys", "update", kid, "--plan", unknown}, []string{"\n  planId: no plan has this id"}},
		{"unknown consumer", []string{"keys", "create", "--service", "contracts", "--name", "x", "--owner", "o", "--privileges", "get", "--consumer", unknown},
			[]string{"\n  consumerId: no consumer has this id"}},
		{"clashing policy", []string{"consumers", "update", cid, "--rate-limit", "burst=9/1s"},
			[]string{`rateLimits[0].name: policy "burst" is named by plan "basic" too`}},
		{"clashing quota", []string{"consumers", "update", cid, "--quota", "5/day"},
			[]string{`quota: plan "basic" carries a quota already`}},
		{"consumer with keys", []string{"consumers", "delete", cid},
			[]string{"(conflict)", "\n  id: the consumer still holds keys"}},
		{"plan in use", []string{"plans", "delete", pid}, []string{"\n  id: the plan is assigned to keys or consumers"}},
		{"external id taken", []string{"consumers", "create", "--name", "again", "--external-id", "acme-2"},
			[]string{"\n  externalId: another consumer has this externalId"}},
		{"plan name taken", []string{"plans", "create", "--name", "basic"}, []string{"\n  name: another plan has this name"}},
		{"no name", []string{"consumers", "create", "--description", "x"}, []string{"\n  name: name is required"}},
		{"bad rate limit", []string{"plans", "create", "--name", "p", "--rate-limit", "lots"}, []string{`--rate-limit "lots": want NAME=LIMIT/WINDOW`}},
		{"none beside a policy", []string{"plans", "update", pid, "--rate-limit", "a=1/1s", "--rate-limit", "none"},
			[]string{"--rate-limit none removes every policy: give it alone"}},
		{"bad quota", []string{"consumers", "update", cid, "--quota", "lots"}, []string{`--quota "lots": want LIMIT/PERIOD`}},
		{"unknown consumer id", []string{"consumers", "show", unknown}, []string{"(not_found)"}},
		{"unknown plan id", []string{"plans", "update", unknown, "--name", "y"}, []string{"(not_found)"}},
		{"unknown consumer's usage", []string{"consumers", "usage", unknown}, []string{"(not_found)"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCLI(t, tt.args...)
			if err == nil {
				t.Fatalf("%s: no error, printed\n%s", strings.Join(tt.args, " "), out)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q lacks %q", strings.Join(tt.args, " "), err, w)
				}
			}
		})
	}
	var consumers []keystore.Consumer
	adminGet(t, "/webapi/consumers", &consumers)
	var plans []keystore.Plan
	adminGet(t, "/webapi/plans", &plans)
	if len(consumers) != 1 || len(plans) != 1 || consumers[0].Description != "a client" || len(consumers[0].RateLimits) != 1 {
		t.Errorf("after the bad input: consumers %+v, plans %+v", consumers, plans)
	}

	// Taken apart in order.
	for _, id := range []string{kid, second.ID, other} {
		run(t, "keys", "delete", id)
	}
	if _, said, err := runCLI(t, "consumers", "delete", cid); err != nil || said != "consumer "+cid+" deleted\n" {
		t.Fatalf("consumers delete: %v %q", err, said)
	}
	if _, _, err := runCLI(t, "consumers", "show", cid); err == nil || !strings.Contains(err.Error(), "not_found") {
		t.Fatalf("show of a deleted consumer: %v", err)
	}
	if _, said, err := runCLI(t, "plans", "delete", pid); err != nil || said != "plan "+pid+" deleted\n" {
		t.Fatalf("plans delete: %v %q", err, said)
	}
	if out := run(t, "plans", "list", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("plans list --json after the delete: %s", out)
	}
}

// keyOf is the key keys create --json printed.
func keyOf(t *testing.T, out string) keystore.Key {
	t.Helper()
	var k keystore.Key
	if err := json.Unmarshal([]byte(out), &k); err != nil || k.ID == "" {
		t.Fatalf("keys create --json printed %v\n%s", err, out)
	}
	return k
}

// adminGet reads what the gateway stored at path of the admin endpoint
// into out, apart from the CLI.
func adminGet(t *testing.T, path string, out any) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://localhost:%d%s", adminPort, path))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}
