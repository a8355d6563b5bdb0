package keyimport

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore"
)

// TestParseJSONL names each kind of bad line, without quoting it.
func TestParseJSONL(t *testing.T) {
	tests := []struct {
		name, line, want string
		said             string // in the problem, when set
	}{
		{"not JSON", `{"service":`, "lines[1]:invalid_json", ""},
		{"unknown field", `{"service":"share","colour":"red"}`, "lines[1]:invalid_json", "colour"},
		{"an unknown field named like a token", `{"service":"share","abcdef0123456789abcdef0123456789":1}`, "lines[1]:invalid_json", ""},
		{"a field twice", `{"service":"share","token":"` + strings.Repeat("A", 20) + `","token":"` + strings.Repeat("B", 20) + `"}`, "lines[1].token:duplicate_key", "token"},
		{"a field twice in another case", `{"service":"share","consumerId":null,"ConsumerID":"x"}`, "lines[1].ConsumerID:duplicate_key", ""},
		{"two objects", `{"name":"a"} {"name":"b"}`, "lines[1]:invalid_json", ""},
		{"empty token", `{"service":"share","token":""}`, "lines[1].token:invalid", ""},
		{"token of another type", `{"service":"share","token":12345678901234567}`, "lines[1].token:invalid_type", ""},
		{"planId of another type", `{"service":"share","planId":12345678901234567}`, "lines[1].planId:invalid_type", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJSONL([]byte(tt.line), "")
			if got := problemtest.InvalidRequest(t, err); len(got) != 1 || got[0] != tt.want {
				t.Errorf("errors %v, want %s", got, tt.want)
			}
			msg := problemtest.Of(t, err).Errors[0].Message
			for _, v := range []string{"12345678901234567", "abcdef0123456789", "AAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBB"} {
				if strings.Contains(msg, v) {
					t.Errorf("the problem quotes the line: %s", msg)
				}
			}
			if tt.said != "" && !strings.Contains(msg, tt.said) {
				t.Errorf("the problem %q does not name %s", msg, tt.said)
			}
		})
	}
	keys, err := ParseJSONL([]byte(`{"name":"a","owner":"o","privileges":["get"]}`), "share")
	if err != nil || keys[0].Input.Service.Value != "share" {
		t.Errorf("--service: %+v %v", keys, err)
	}
}

// TestParseKong maps a decK dump: a consumer a consumer, with its
// custom_id as externalId and its rate limits nested and top-level; each
// credential a key of it with the owner, name, the union of the
// consumer's groups and the ttl, and no copy of the limits; and reports
// per consumer what cannot be mapped.
func TestParseKong(t *testing.T) {
	raw, err := os.ReadFile("testdata/kong.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := ParseKong(raw, testGrants, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	keys, skipped := set.Keys, set.Skipped
	if len(keys) != 3 || len(skipped) != 1 || skipped[0] != (keystore.SkippedConsumer{Line: 27, Consumer: "no-key", Reason: "no key-auth credential"}) {
		t.Fatalf("%d keys, skipped %+v; want 3, and no-key (no credential)", len(keys), skipped)
	}
	if len(set.Consumers) != 2 || len(set.Plans) != 0 {
		t.Fatalf("%d consumers, %d plans; want 2 and none", len(set.Consumers), len(set.Plans))
	}
	billing, reporting := set.Consumers[0], set.Consumers[1]
	if billing.Line != 6 || billing.Input.Name.Value != "billing" || billing.Input.ExternalID.Value != "cust-42" || billing.Plan != 0 ||
		len(billing.Input.RateLimits.Value) != 2 || !strings.Contains(string(billing.Input.RateLimits.Value[0]), `"windowSeconds":1`) ||
		!strings.Contains(string(billing.Input.Quota.Value), `"period":"month"`) {
		t.Errorf("billing: %+v, limits %s, quota %s", billing, billing.Input.RateLimits.Value, billing.Input.Quota.Value)
	}
	if reporting.Input.Name.Value != "reporting" || reporting.Input.ExternalID.Set || len(reporting.Input.RateLimits.Value) != 1 ||
		!strings.Contains(string(reporting.Input.RateLimits.Value[0]), `"hour"`) || reporting.Input.Quota.Set {
		t.Errorf("reporting (a top-level plugin): %+v %s", reporting, reporting.Input.RateLimits.Value)
	}
	got := map[string]keystore.ImportKey{}
	for _, k := range keys {
		got[k.Token] = k
		if k.Input.RateLimits.Set || k.Input.Quota.Set {
			t.Errorf("key at line %d carries limits of its own: %s %s", k.Line, k.Input.RateLimits.Value, k.Input.Quota.Value)
		}
	}
	live := got["billing-live-key-0123456789abcdef"]
	if in := live.Input; in.Service.Value != "contracts" || in.Owner.Value != "cust-42" || in.Name.Value != "billing #1" ||
		!slices.Equal(in.Privileges.Value, []string{"create", "get", "search"}) || in.NotValidAfter.Set || live.Consumer != 1 {
		t.Errorf("billing's first key: %+v, consumer %d", in, live.Consumer)
	}
	backup := got["billing-backup-key-fedcba9876543210"]
	if backup.Input.NotValidAfter.Value != t0.Add(24*time.Hour).Format(time.RFC3339) || backup.Input.Name.Value != "billing #2" || backup.Line != 10 || backup.Consumer != 1 {
		t.Errorf("billing's second key: %+v, line %d, consumer %d", backup.Input, backup.Line, backup.Consumer)
	}
	rep := got["reporting-0000-1111-2222-3333"]
	if rep.Input.Service.Value != "share" || rep.Input.Owner.Value != "reporting" || rep.Consumer != 2 {
		t.Errorf("reporting's key: %+v, consumer %d", rep.Input, rep.Consumer)
	}
	if _, err := ParseKong(raw, testGrants, "share", t0); err == nil || !slices.Equal(problemtest.InvalidRequest(t, err), []string{"lines[6].acls:other_service"}) {
		t.Errorf("--service share: %v", err)
	}

	raw, err = os.ReadFile("testdata/kong-unmappable.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseKong(raw, testGrants, "", t0)
	want := []string{"lines[3].acls:unmapped", "lines[8].acls:two_services", "lines[14].plugins:unmapped"}
	if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
	if strings.Contains(err.Error(), "key-0123") {
		t.Error("the problem quotes a token")
	}
	if _, err := ParseKong([]byte("- not a dump"), testGrants, "", t0); err == nil {
		t.Error("a YAML list parsed as a dump")
	}
}

// TestParseKongPlugins: a top-level plugin naming its consumer by id, a
// global rate limit for consumers without their own, an allow list; and,
// reported per consumer, a limit by IP, a plugin keys have no equivalent
// of, a ttl out of range. The file's problems and the keys' are reported
// together.
func TestParseKongPlugins(t *testing.T) {
	raw, err := os.ReadFile("testdata/kong-plugins.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set, err := ParseKong(raw, testGrants, "", t0)
	want := []string{"lines[14].ttl:out_of_range", "lines[22].plugins:unmapped", "lines[30].plugins:unmapped"}
	if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
	consumers := map[string]keystore.ImportConsumer{}
	for _, c := range set.Consumers {
		consumers[c.Input.Name.Value] = c
	}
	cid := consumers["only-custom-id"].Input
	if cid.ExternalID.Value != "only-custom-id" || len(cid.RateLimits.Value) != 1 || !strings.Contains(string(cid.RateLimits.Value[0]), `"second"`) {
		t.Errorf("the consumer named by id: %+v %s", cid, cid.RateLimits.Value)
	}
	if office := consumers["office"].Input; len(office.RateLimits.Value) != 1 || !strings.Contains(string(office.RateLimits.Value[0]), `"hour"`) {
		t.Errorf("office: limits %s, want the global hour limit", office.RateLimits.Value)
	}
	got := map[string]keystore.ImportKey{}
	for _, k := range set.Keys {
		got[k.Token] = k
	}
	if cid := got["custom-id-only-key-0123456789"].Input; cid.Owner.Value != "only-custom-id" || cid.RateLimits.Set {
		t.Errorf("the key of the consumer named by id: %+v", cid)
	}
	if office := got["office-only-key-0123456789abc"].Input; !slices.Equal(office.AllowedIPs.Value, []string{"10.1.0.0/16", "192.0.2.7"}) || office.RateLimits.Set {
		t.Errorf("office's key: allowed %v, limits %s", office.AllowedIPs.Value, office.RateLimits.Value)
	}

	// A bad privileges map is named by group, and the dump's problems
	// come with it; a consumer of a bad group is not also unmapped.
	_, err = ParseKong(raw, map[string]Grant{"readers": {Service: "contract", Privileges: []string{"get"}}, "x": {Service: "share"}}, "", t0)
	if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, append([]string{"privilegesMap.readers.service:invalid", "privilegesMap.x.privileges:required"}, want...)) {
		t.Errorf("a bad map: %v", got)
	}
}

// TestParseKongReferences: a top-level plugin goes to the consumer decK
// would give it: by username or id, else by a custom_id that one
// consumer alone has; a name that fits several consumers or none is a
// problem at the plugin's line, not a guess.
func TestParseKongReferences(t *testing.T) {
	tests := []struct {
		name, ref string
		// restricted is the consumer whose key gets the allow list.
		restricted string
		errs       []string
	}{
		{name: "a username before an earlier custom_id", ref: "beta", restricted: "beta"},
		{name: "an id", ref: "0b7c4c2e-1111-4222-8333-944455556666", restricted: "beta"},
		{name: "a custom_id one consumer has", ref: "crm", restricted: "gamma"},
		{name: "a username as a mapping", ref: "{username: gamma}", restricted: "gamma"},
		{name: "no consumer", ref: "nobody", errs: []string{"lines[18].consumer:unknown_consumer"}},
		{name: "an id of no consumer", ref: "0b7c4c2e-0000-4222-8333-944455556666", errs: []string{"lines[18].consumer:unknown_consumer"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := ParseKong([]byte(fmt.Sprintf(kongRefDump, tt.ref)), testGrants, "", t0)
			if tt.errs != nil {
				if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, tt.errs) {
					t.Errorf("errors %v, want %v", got, tt.errs)
				}
				if strings.Contains(problemText(err), "0b7c4c2e") {
					t.Error("the problem says back a long value")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range set.Keys {
				owner := strings.TrimPrefix(k.Input.Description.Value, "imported from Kong consumer ")
				if got := k.Input.AllowedIPs.Value; (owner == tt.restricted) != slices.Equal(got, []string{"192.0.2.7"}) {
					t.Errorf("consumer %s: allowedIps %v (the plugin is %s's)", owner, got, tt.restricted)
				}
			}
		})
	}

	// A custom_id or a username two consumers have names neither.
	for _, dump := range []string{
		strings.Replace(fmt.Sprintf(kongRefDump, "crm"), "custom_id: beta", "custom_id: crm", 1),
		strings.Replace(fmt.Sprintf(kongRefDump, "gamma"), "username: alpha", "username: gamma", 1),
	} {
		if _, err := ParseKong([]byte(dump), testGrants, "", t0); !slices.Equal(problemtest.InvalidRequest(t, err), []string{"lines[18].consumer:ambiguous"}) {
			t.Errorf("a name of two consumers: %v", err)
		}
	}
}

// TestParseKongDenied: a consumer in a group an enabled acl plugin
// denies, wherever the plugin is, is a problem of the import: a key
// cannot be refused by group.
func TestParseKongDenied(t *testing.T) {
	consumer := `consumers:
- username: banned
  keyauth_credentials:
  - key: banned-key-0123456789abcdef
  acls: [{group: readers}, {group: blocked}]
`
	tests := []struct {
		name, rest string
		errs       []string
	}{
		{"a global acl plugin", "plugins:\n- name: acl\n  config: {deny: [blocked]}\n", []string{"lines[2].acls:denied"}},
		{"an acl plugin of a service", "services:\n- name: api\n  plugins:\n  - name: acl\n    config: {deny: [blocked]}\n", []string{"lines[2].acls:denied"}},
		{"an acl plugin of a route", "services:\n- name: api\n  routes:\n  - name: r\n    plugins:\n    - {name: acl, config: {deny: [blocked]}}\n", []string{"lines[2].acls:denied"}},
		{"a top-level acl plugin of a route", "plugins:\n- {name: acl, route: r, config: {deny: [blocked]}}\n", []string{"lines[2].acls:denied"}},
		{"a disabled acl plugin", "plugins:\n- {name: acl, enabled: false, config: {deny: [blocked]}}\n", nil},
		{"another group denied", "plugins:\n- {name: acl, config: {deny: [others]}}\n", nil},
		{"an allow list", "plugins:\n- {name: acl, config: {allow: [readers]}}\n", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := ParseKong([]byte(consumer+tt.rest), testGrants, "", t0)
			if tt.errs == nil {
				if err != nil || len(set.Keys) != 1 {
					t.Errorf("%d keys, %v", len(set.Keys), err)
				}
				return
			}
			if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, tt.errs) {
				t.Errorf("errors %v, want %v", got, tt.errs)
			}
			if !strings.Contains(problemText(err), "blocked") {
				t.Errorf("the problem does not name the group: %+v", err)
			}
		})
	}
}

// problemText is the messages of a 400 problem, one a line.
func problemText(err error) string {
	var d *problem.Details
	if !errors.As(err, &d) {
		return fmt.Sprint(err)
	}
	var b strings.Builder
	for _, e := range d.Errors {
		b.WriteString(e.Field + ": " + e.Message + "\n")
	}
	return b.String()
}

// TestImportFileProblems: a file that is not what its format says is
// one problem that says what it looks like, and a YAML syntax error is
// named at the parser's line and column.
func TestImportFileProblems(t *testing.T) {
	dump, err := os.ReadFile("testdata/kong.yaml")
	if err != nil {
		t.Fatal(err)
	}
	jsonl := `{"service":"share","name":"a","owner":"o","privileges":["get"]}` + "\n" + `{"service":"share","name":"b","owner":"o","privileges":["get"]}`
	tests := []struct {
		name, format, data string
		field, says        string
	}{
		{"a decK dump as JSON Lines", "jsonl", string(dump), "format", "this looks like a decK dump"},
		{"JSON Lines as a decK dump", "kong", jsonl, "lines[1]", "this looks like JSON Lines"},
		{"a YAML syntax error", "kong", "consumers:\n- username: a\n  keyauth_credentials:\n  - key: a-key-0123456789abcdef\n   acls: x\n", "lines[5]", "line 5, column 4: did not find expected key"},
		{"a tab", "kong", "consumers:\n- username: a\n\tkey: secret-value-0123456789\n", "lines[3]", "line 3, column 1: found a tab character"},
		{"a quote left open", "kong", "consumers:\n- username: \"a-long-secret-value-0123\n", "lines[3]", "line 3, column 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.format == "kong" {
				_, err = ParseKong([]byte(tt.data), testGrants, "", t0)
			} else {
				_, err = ParseJSONL([]byte(tt.data), "")
			}
			var d *problem.Details
			if !errors.As(err, &d) || len(d.Errors) != 1 || d.Errors[0].Field != tt.field || !strings.Contains(d.Errors[0].Message, tt.says) {
				t.Fatalf("%+v, want one problem at %s saying %q", err, tt.field, tt.says)
			}
			if strings.Contains(d.Errors[0].Message, "secret-value") {
				t.Error("the problem says back a value")
			}
		})
	}

	// The privileges map, read by the command: its syntax errors at
	// their line and column, fields it does not have by line; its
	// groups are checked with the file.
	for _, tt := range []struct{ data, want string }{
		{"readers: {service: contracts, privileges: [get]\nwriters: x\n", "line 2, column 1: did not find expected ',' or '}'"},
		{"readers: {service: contracts, colour: red}\n", "line 1: the map is of ACL group to {service, privileges}"},
		{"readers: {service: contract, privileges: [fly]}\n", ""},
	} {
		_, err := ParsePrivilegesMap([]byte(tt.data))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("privileges map %q: %v, want %q", tt.data, err, tt.want)
		}
	}
}

// TestParseKongPluginProblems: every problem of one plugin comes at once
// (a limit by IP and a yearly limit of the same rate-limiting plugin);
// a YAML syntax error names its line and column without calling a dump
// something else.
func TestParseKongPluginProblems(t *testing.T) {
	dump := `_format_version: "3.0"
consumers:
- username: by-ip
  keyauth_credentials:
  - key: limited-by-ip-0123456789abc
  acls:
  - group: readers
  plugins:
  - name: rate-limiting
    config: {minute: 10, year: 1000, limit_by: ip}
`
	_, err := ParseKong([]byte(dump), testGrants, "", t0)
	var msgs []string
	var pe *problem.Details
	if errors.As(err, &pe) {
		for _, fe := range pe.Errors {
			msgs = append(msgs, fe.Field+": "+fe.Message)
		}
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], "limits by ip") || !strings.Contains(msgs[1], "yearly") {
		t.Errorf("problems %q, want the limit by IP and the yearly limit", msgs)
	}
	_, err = ParseKong([]byte("consumers:\n- username: [a\n"), testGrants, "", t0)
	if err == nil || strings.Contains(err.Error(), "not a decK dump") {
		t.Errorf("a syntax error: %v", err)
	}
	if !errors.As(err, &pe) || len(pe.Errors) != 1 || !strings.Contains(pe.Errors[0].Message, "column") {
		t.Errorf("a syntax error: %v, want one problem naming line and column", err)
	}
}

// TestParseKongSaysNoTokenBack: a consumer or a group whose name may be a
// token (16 characters or more, not words joined by hyphens) is named by
// its line in every problem, note and skipped consumer; such a name made
// of words is said as it is.
func TestParseKongSaysNoTokenBack(t *testing.T) {
	secret := token.New()
	hexName := "8c1f2e0d9b7a4c3e8f6a5b4c3d2e1f00"
	dump := `consumers:
- username: "` + secret + `"
  keyauth_credentials: [{key: tokuser-aaaaaaaaaaaaaaaaaaaaaaaaa1}]
  acls: [{group: readers}]
  plugins: [{name: rate-limiting, config: {year: 10}}]
- username: ` + hexName + `
  keyauth_credentials: [{key: tokuser-aaaaaaaaaaaaaaaaaaaaaaaaa2}]
  acls: [{group: ` + secret + `}, {group: contract-readers-production}]
- custom_id: ` + secret + `
- username: ok
  keyauth_credentials: [{key: tokuser-aaaaaaaaaaaaaaaaaaaaaaaaa3}]
  acls: [{group: readers}]
  groups: [{name: ` + hexName + `}]
  plugins: [{name: rate-limiting, config: {minute: 9}}]
consumer_groups:
- name: ` + hexName + `
  plugins: [{name: rate-limiting, config: {minute: 1}}, {name: request-transformer}]
`
	set, err := ParseKong([]byte(dump), testGrants, "", t0)
	text := problemText(err)
	for _, sk := range set.Skipped {
		text += fmt.Sprintf("skipped: %+v\n", sk)
	}
	for _, c := range set.Consumers {
		text += "note: " + c.Note + "\n"
	}
	for _, says := range []string{
		"lines[2].plugins: consumer at line 2: a yearly rate limit",
		"lines[6].acls: consumer at line 6 is in no group of the privileges map (its groups: (a value of 16 characters or more), contract-readers-production)",
		"skipped: {Line:9 Consumer:at line 9 Reason:no key-auth credential}",
		"lines[16].plugins: consumer group at line 16: plugin request-transformer, which keygate has no equivalent of",
		"note: its own rate-limiting overrides consumer group at line 16's, as on Kong: it takes no plan",
	} {
		if !strings.Contains(text, says) {
			t.Errorf("nothing says %q:\n%s", says, text)
		}
	}
	if strings.Contains(text, secret) || strings.Contains(text, hexName) {
		t.Errorf("a name of 16 characters or more said back:\n%s", text)
	}
}
