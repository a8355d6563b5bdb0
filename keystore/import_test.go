package keystore

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/token"
)

// works reports whether token opens key check of service.
func works(k *Keys, service access.Service, token string) bool {
	table := &testContractsTable
	if service == access.ServiceShare {
		table = &testShareTable
	}
	path := "/webapi/contracts"
	if service == access.ServiceShare {
		path = "/webapi/share"
	}
	d := Authorize(&Request{Service: service, Authorization: []string{"Bearer " + token},
		ClientIP: netip.MustParseAddr("192.0.2.1"), Method: http.MethodGet, Path: path + "/x", Now: t0}, table, k.Lookup)
	return d.Entry != nil && d.Reason != "invalid_key"
}

// TestImport imports keys with their tokens on each backend: the tokens
// work at once and after a restart, a key without a token gets one of
// ours, a dry run and a refused import store nothing, and nothing of a
// token is in the report.
func TestImport(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		mine := mustCreate(t, e.keys, `{`+validContracts+`}`)
		file := strings.Join([]string{
			`{"service":"share","name":"from kong","owner":"acme","privileges":["get","list"],"token":"Kong-Legacy-Token-0123456789"}`,
			``,
			`{"service":"contracts","name":"fresh","owner":"acme","privileges":["get"]}`,
			`{"service":"contracts","name":"ours","owner":"bob","privileges":["get"],"token":"` + token.New() + `"}`,
		}, "\n")
		keys, err := ParseJSONL([]byte(file), "")
		if err != nil {
			t.Fatal(err)
		}
		if lines := []int{keys[0].Line, keys[1].Line, keys[2].Line}; !slices.Equal(lines, []int{1, 3, 4}) {
			t.Fatalf("lines %v", lines)
		}

		// A dry run checks and stores nothing.
		before := len(e.stored(t))
		report, err := e.keys.Import(ImportSet{Keys: keys}, true, nil)
		if err != nil || report.Imported != 3 || report.Kept != 2 || !report.DryRun || len(e.stored(t)) != before {
			t.Fatalf("dry run: %+v %v, %d stored (was %d)", report, err, len(e.stored(t)), before)
		}
		if works(e.keys, access.ServiceShare, "Kong-Legacy-Token-0123456789") {
			t.Fatal("a dry run's token works")
		}

		report, err = e.keys.Import(ImportSet{Keys: keys}, false, nil)
		if err != nil || report.Imported != 3 || report.Kept != 2 {
			t.Fatalf("import: %+v %v", report, err)
		}
		if s := fmt.Sprintf("%+v", report); strings.Contains(s, "Kong-Legacy") || strings.Contains(s, token.Prefix) {
			t.Errorf("the report holds a token: %s", s)
		}
		for _, k := range []*Keys{e.keys, e.reopen(t)} {
			if !works(k, access.ServiceShare, "Kong-Legacy-Token-0123456789") || !works(k, access.ServiceContracts, keys[2].Token) {
				t.Fatal("an imported token does not work")
			}
			if works(k, access.ServiceContracts, "Kong-Legacy-Token-0123456789") {
				t.Fatal("an imported token works for the other service")
			}
		}
		fresh, err := e.keys.Get(report.Keys[1].ID)
		if err != nil || fresh.Name != "fresh" {
			t.Fatalf("fresh key: %+v %v", fresh, err)
		}
		if tok, err := e.keys.Reveal(fresh.ID); err != nil || !token.WellFormed(tok) || !works(e.keys, access.ServiceContracts, tok) {
			t.Fatalf("the key given a new token: %q %v", tok, err)
		}
		foreign, _ := e.keys.Get(report.Keys[0].ID)
		if foreign.TokenPrefix != "Kong" {
			t.Errorf("a foreign token shows %q, want its first 4 characters", foreign.TokenPrefix)
		}

		// All or nothing: one bad line, a token already stored, a token
		// twice in the file: each named by line, nothing stored.
		stored := len(e.stored(t))
		bad := strings.Join([]string{
			`{"service":"share","name":"ok","owner":"acme","privileges":["get"],"token":"another-good-token-0123"}`,
			`{"service":"share","name":"taken","owner":"acme","privileges":["get"],"token":"Kong-Legacy-Token-0123456789"}`,
			`{"service":"share","name":"twice","owner":"acme","privileges":["get"],"token":"another-good-token-0123"}`,
			`{"service":"share","name":"mine","owner":"acme","privileges":["get"],"token":"` + mine.Token + `"}`,
			`{"service":"share","name":"short","owner":"acme","privileges":["get"],"token":"short"}`,
			`{"service":"share","name":"spaced","owner":"acme","privileges":["get"],"token":"has a space in it 0123"}`,
			`{"service":"share","name":"fake ours","owner":"acme","privileges":["get"],"token":"kg_notOneOfOursAtAll0123"}`,
			`{"service":"nope","name":"","owner":"acme","privileges":["get"]}`,
		}, "\n")
		keys, err = ParseJSONL([]byte(bad), "")
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.keys.Import(ImportSet{Keys: keys}, false, nil)
		want := []string{"lines[2].token:exists", "lines[3].token:duplicate", "lines[4].token:exists", "lines[5].token:invalid",
			"lines[6].token:invalid", "lines[7].token:invalid", "lines[8].service:invalid", "lines[8].name:invalid"}
		if got := fieldErrors(t, err); !slices.Equal(got, want) {
			t.Errorf("errors %v, want %v", got, want)
		}
		if n := len(e.stored(t)); n != stored || works(e.keys, access.ServiceShare, "another-good-token-0123") {
			t.Errorf("a refused import stored something: %d records, was %d", n, stored)
		}
		if msg := err.Error() + fmt.Sprint(err); strings.Contains(msg, "Kong-Legacy") || strings.Contains(msg, mine.Token) {
			t.Errorf("the refusal holds a token: %s", msg)
		}
	})
}

// TestParseJSONL names each kind of bad line, without quoting it.
func TestParseJSONL(t *testing.T) {
	tests := []struct {
		name, line, want string
	}{
		{"not JSON", `{"service":`, "lines[1]:invalid_json"},
		{"unknown field", `{"service":"share","colour":"red"}`, "lines[1]:invalid_json"},
		{"two objects", `{"name":"a"} {"name":"b"}`, "lines[1]:invalid_json"},
		{"empty token", `{"service":"share","token":""}`, "lines[1].token:invalid"},
		{"token of another type", `{"service":"share","token":12345678901234567}`, "lines[1]:invalid_json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseJSONL([]byte(tt.line), "")
			if got := fieldErrors(t, err); len(got) != 1 || got[0] != tt.want {
				t.Errorf("errors %v, want %s", got, tt.want)
			}
			if strings.Contains(err.Error(), "12345678901234567") {
				t.Error("the problem quotes the line")
			}
		})
	}
	keys, err := ParseJSONL([]byte(`{"name":"a","owner":"o","privileges":["get"]}`), "share")
	if err != nil || keys[0].Input.Service.Value != "share" {
		t.Errorf("--service: %+v %v", keys, err)
	}
}

var testGrants = map[string]Grant{
	"readers":       {Service: "contracts", Privileges: []string{"get", "search"}},
	"writers":       {Service: "contracts", Privileges: []string{"create", "get"}},
	"share-readers": {Service: "share", Privileges: []string{"get", "list"}},
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
	if len(keys) != 3 || len(skipped) != 1 || skipped[0] != (SkippedConsumer{Line: 27, Consumer: "no-key", Reason: "no key-auth credential"}) {
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
	got := map[string]ImportKey{}
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
	if _, err := ParseKong(raw, testGrants, "share", t0); err == nil || !slices.Equal(fieldErrors(t, err), []string{"lines[6].acls:other_service"}) {
		t.Errorf("--service share: %v", err)
	}

	raw, err = os.ReadFile("testdata/kong-unmappable.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = ParseKong(raw, testGrants, "", t0)
	want := []string{"lines[3].acls:unmapped", "lines[8].acls:two_services", "lines[14].plugins:unmapped"}
	if got := fieldErrors(t, err); !slices.Equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
	if strings.Contains(err.Error(), "key-0123") {
		t.Error("the problem quotes a token")
	}
	if _, err := ParseKong([]byte("- not a dump"), testGrants, "", t0); err == nil {
		t.Error("a YAML list parsed as a dump")
	}
}

// TestImportReachesOtherInstance: keys imported on one instance work on
// another following the same PostgreSQL within a second, brought by one
// notification.
func TestImportReachesOtherInstance(t *testing.T) {
	e := newEnv(t, storetest.OpenPostgres(t))
	other := followingInstance(t, e)
	first := mustCreate(t, e.keys, `{`+validContracts+`}`)
	testwait.For(t, testwait.Generous, "the other instance to listen", func() bool { return other.Lookup(token.HashOf(first.Token)) != nil })

	var lines []string
	for i := range 500 {
		lines = append(lines, fmt.Sprintf(`{"service":"share","name":"k%d","owner":"acme","privileges":["get"],"token":"imported-token-%08d"}`, i, i))
	}
	keys, err := ParseJSONL([]byte(strings.Join(lines, "\n")), "")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.keys.Import(ImportSet{Keys: keys}, false, nil); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, time.Second, "the imported keys on the other instance", func() bool {
		return works(other, access.ServiceShare, "imported-token-00000000") && works(other, access.ServiceShare, "imported-token-00000499")
	})
	t.Logf("500 imported keys on the other instance after %v", time.Since(start).Round(time.Millisecond))
}

// TestImportRace: a token that another instance stored after this one
// last read the keys fails the whole import with a 409, storing nothing.
func TestImportRace(t *testing.T) {
	e := newEnv(t, storetest.OpenPostgres(t))
	other := e.reopen(t)
	one := func(name, token string) []ImportKey {
		keys, err := ParseJSONL([]byte(`{"service":"share","name":"`+name+`","owner":"acme","privileges":["get"],"token":"`+token+`"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if _, err := other.Import(ImportSet{Keys: one("there", "raced-token-0123456789")}, false, nil); err != nil {
		t.Fatal(err)
	}
	before := len(e.stored(t))
	keys := append(one("fine", "fine-token-0123456789"), one("raced", "raced-token-0123456789")...)
	keys[1].Line = 2
	if _, err := e.keys.Import(ImportSet{Keys: keys}, false, nil); err != ErrTokenTaken {
		t.Fatalf("import of a token stored meanwhile: %v", err)
	}
	if n := len(e.stored(t)); n != before || works(e.reopen(t), access.ServiceShare, "fine-token-0123456789") {
		t.Errorf("the failed import stored something: %d records, was %d", n, before)
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
	if got := fieldErrors(t, err); !slices.Equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
	consumers := map[string]ImportConsumer{}
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
	got := map[string]ImportKey{}
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
	if got := fieldErrors(t, err); !slices.Equal(got, append([]string{"privilegesMap.readers.service:invalid", "privilegesMap.x.privileges:required"}, want...)) {
		t.Errorf("a bad map: %v", got)
	}
}

// TestImportReportsEverything: the problems of reading a file and those
// of its keys come in one reply, capped, each long quoted value left out
// (a token put in the wrong field); past MaxImport keys, the import is
// refused as it is read.
func TestImportReportsEverything(t *testing.T) {
	e := newEnv(t, storetest.OpenBolt(t))
	secret := "ZZSECRETTOKEN0123456789abcdef"
	file := "\ufeff" + `{"service":"share",` + "\n" +
		`{"service":"share","name":"x","owner":"o","privileges":["` + secret + `"]}` + "\n" +
		`{"` + secret + `":1}`
	keys, perr := ParseJSONL([]byte(file), "")
	_, err := e.keys.Import(ImportSet{Keys: keys}, false, perr)
	got := fieldErrors(t, err)
	if want := []string{"lines[1]:invalid_json", "lines[2].privileges[0]:unknown_privilege", "lines[3]:invalid_json"}; !slices.Equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
	if strings.Contains(fmt.Sprint(err), secret) || strings.Contains(fmt.Sprintf("%+v", err), secret) {
		t.Errorf("a refusal says the token back: %+v", err)
	}

	var lines []string
	for i := range 1500 {
		lines = append(lines, fmt.Sprintf(`{"service":"share","name":"k%d","owner":"o","privileges":["fly"]}`, i))
	}
	keys, perr = ParseJSONL([]byte(strings.Join(lines, "\n")), "")
	_, err = e.keys.Import(ImportSet{Keys: keys}, false, perr)
	if got := fieldErrors(t, err); len(got) != maxImportProblems+1 || got[maxImportProblems] != "lines:too_many" {
		t.Errorf("%d problems, the last %q", len(got), got[len(got)-1])
	}

	lines = lines[:0]
	for i := range MaxImport + 1 {
		lines = append(lines, fmt.Sprintf(`{"service":"share","name":"k%d","owner":"o","privileges":["get"]}`, i))
	}
	keys, perr = ParseJSONL([]byte(strings.Join(lines, "\n")), "")
	if len(keys) != MaxImport || !slices.Contains(fieldErrors(t, perr), "lines:too_many") {
		t.Errorf("%d keys read of %d lines", len(keys), MaxImport+1)
	}
}

// TestImportsOneAtATime: imports of one token at once give it to one key.
func TestImportsOneAtATime(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		const n = 8
		errs := make(chan error, n)
		for i := range n {
			go func() {
				keys, err := ParseJSONL([]byte(fmt.Sprintf(`{"service":"share","name":"racer %d","owner":"o","privileges":["get"],"token":"contested-token-0123456789"}`, i)), "")
				if err != nil {
					errs <- err
					return
				}
				_, err = e.keys.Import(ImportSet{Keys: keys}, false, nil)
				errs <- err
			}()
		}
		ok := 0
		for range n {
			if err := <-errs; err == nil {
				ok++
			}
		}
		if ok != 1 {
			t.Fatalf("%d imports of one token succeeded, want 1", ok)
		}
		count := 0
		for _, k := range e.reopen(t).List("") {
			if strings.HasPrefix(k.Name, "racer") {
				count++
			}
		}
		if count != 1 {
			t.Errorf("%d keys hold the token after a restart, want 1", count)
		}
	})
}

// TestRedactPath: an imported token in a path is left out of the audit
// log as keygate's own are; other segments stay.
func TestRedactPath(t *testing.T) {
	e := newEnv(t, storetest.OpenBolt(t))
	keys, _ := ParseJSONL([]byte(`{"service":"share","name":"x","owner":"o","privileges":["get"],"token":"foreign-token-in-a-path"}`), "")
	if _, err := e.keys.Import(ImportSet{Keys: keys}, false, nil); err != nil {
		t.Fatal(err)
	}
	mine := mustCreate(t, e.keys, `{`+validContracts+`}`)
	for path, want := range map[string]string{
		"/webapi/share/foreign-token-in-a-path":                  "/webapi/share/[redacted]",
		"/webapi/share/foreign-token-in-a-path/activity":         "/webapi/share/[redacted]/activity",
		"/webapi/contracts/" + mine.Token:                        "/webapi/contracts/kg_[redacted]",
		"/webapi/share/not-a-token-of-any-key-here":              "/webapi/share/not-a-token-of-any-key-here",
		"/webapi/contracts/01a2139b-46b7-72cb-bd43-7aba811f6931": "/webapi/contracts/01a2139b-46b7-72cb-bd43-7aba811f6931",
	} {
		if got := e.keys.RedactPath(path); got != want {
			t.Errorf("RedactPath(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestImportKongEveryProblem: a dump with a problem of every kind (a bad
// group of the map, a consumer in no group, a plugin keys cannot carry, a
// limit beyond a key's, a token stored before, one twice in the file, one
// too short) gets all of them in one reply, and nothing is stored.
func TestImportKongEveryProblem(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		stored, err := ParseJSONL([]byte(`{"service":"share","name":"there","owner":"o","privileges":["get"],"token":"stored-before-this-import-0123"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.keys.Import(ImportSet{Keys: stored}, false, nil); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile("testdata/kong-every-problem.yaml")
		if err != nil {
			t.Fatal(err)
		}
		grants := map[string]Grant{"readers": testGrants["readers"], "writers": {Service: "contracts", Privileges: []string{"fly"}}}
		before := len(e.stored(t))
		set, perr := ParseKong(raw, grants, "", t0)
		_, err = e.keys.Import(set, false, perr)
		want := []string{
			"privilegesMap.writers.privileges[0]:unknown_privilege", // the map
			"lines[6].plugins:unmapped",                             // a plugin
			"lines[8].key:invalid",                                  // a short token
			"lines[14].acls:unmapped",                               // a group
			"lines[14].rateLimits[0].limit:out_of_range",            // a limit, the consumer's
			"lines[24].key:duplicate",                               // twice in the file
			"lines[25].key:exists",                                  // stored before
		}
		if got := fieldErrors(t, err); !slices.Equal(got, want) {
			t.Errorf("errors\n%v, want\n%v", got, want)
		}
		if n := len(e.stored(t)); n != before || works(e.keys, access.ServiceContracts, "twice-in-this-file-0123456789") ||
			len(e.reopen(t).ListConsumers()) != 0 {
			t.Errorf("a refused import stored something: %d records, was %d", n, before)
		}
		if msg := problemText(err); strings.Contains(msg, "twice-in-this") || strings.Contains(msg, "stored-before") {
			t.Errorf("the refusal holds a token: %s", msg)
		}
	})
}

// kongRefDump is a dump of three consumers for TestParseKongReferences;
// %s is the consumer its top-level plugin names.
const kongRefDump = `consumers:
- username: alpha
  custom_id: beta
  keyauth_credentials:
  - key: alpha-key-0123456789abcdef
  acls: [{group: readers}]
- username: beta
  id: 0b7c4c2e-1111-4222-8333-944455556666
  keyauth_credentials:
  - key: beta-key-0123456789abcdef
  acls: [{group: readers}]
- username: gamma
  custom_id: crm
  keyauth_credentials:
  - key: gamma-key-0123456789abcdef
  acls: [{group: readers}]
plugins:
- name: ip-restriction
  consumer: %s
  config: {allow: [192.0.2.7]}
`

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
				if got := fieldErrors(t, err); !slices.Equal(got, tt.errs) {
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
		if _, err := ParseKong([]byte(dump), testGrants, "", t0); !slices.Equal(fieldErrors(t, err), []string{"lines[18].consumer:ambiguous"}) {
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
			if got := fieldErrors(t, err); !slices.Equal(got, tt.errs) {
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
