package keyimport

import (
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/problemtest"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/keystore"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
)

// works reports whether token opens key check of service.
func works(k *keystore.Keys, service access.Service, token string) bool {
	table := &contracts.Operations
	if service == access.ServiceShare {
		table = &share.Operations
	}
	path := "/webapi/contracts"
	if service == access.ServiceShare {
		path = "/webapi/share"
	}
	d := keystore.Authorize(&keystore.Request{Service: service, Authorization: []string{"Bearer " + token},
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
		report, err := e.keys.Import(keystore.ImportSet{Keys: keys}, true, nil)
		if err != nil || report.Imported != 3 || report.Kept != 2 || !report.DryRun || len(e.stored(t)) != before {
			t.Fatalf("dry run: %+v %v, %d stored (was %d)", report, err, len(e.stored(t)), before)
		}
		if works(e.keys, access.ServiceShare, "Kong-Legacy-Token-0123456789") {
			t.Fatal("a dry run's token works")
		}

		report, err = e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil)
		if err != nil || report.Imported != 3 || report.Kept != 2 {
			t.Fatalf("import: %+v %v", report, err)
		}
		if s := fmt.Sprintf("%+v", report); strings.Contains(s, "Kong-Legacy") || strings.Contains(s, token.Prefix) {
			t.Errorf("the report holds a token: %s", s)
		}
		for _, k := range []*keystore.Keys{e.keys, e.reopen(t)} {
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
		_, err = e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil)
		want := []string{"lines[2].token:exists", "lines[3].token:duplicate", "lines[4].token:exists", "lines[5].token:invalid",
			"lines[6].token:invalid", "lines[7].token:invalid", "lines[8].service:invalid", "lines[8].name:invalid"}
		if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, want) {
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

var testGrants = map[string]Grant{
	"readers":       {Service: "contracts", Privileges: []string{"get", "search"}},
	"writers":       {Service: "contracts", Privileges: []string{"create", "get"}},
	"share-readers": {Service: "share", Privileges: []string{"get", "list"}},
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
	if _, err := e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil); err != nil {
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
	one := func(name, token string) []keystore.ImportKey {
		keys, err := ParseJSONL([]byte(`{"service":"share","name":"`+name+`","owner":"acme","privileges":["get"],"token":"`+token+`"}`), "")
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if _, err := other.Import(keystore.ImportSet{Keys: one("there", "raced-token-0123456789")}, false, nil); err != nil {
		t.Fatal(err)
	}
	before := len(e.stored(t))
	keys := append(one("fine", "fine-token-0123456789"), one("raced", "raced-token-0123456789")...)
	keys[1].Line = 2
	if _, err := e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil); err != keystore.ErrTokenTaken {
		t.Fatalf("import of a token stored meanwhile: %v", err)
	}
	if n := len(e.stored(t)); n != before || works(e.reopen(t), access.ServiceShare, "fine-token-0123456789") {
		t.Errorf("the failed import stored something: %d records, was %d", n, before)
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
	_, err := e.keys.Import(keystore.ImportSet{Keys: keys}, false, perr)
	got := problemtest.InvalidRequest(t, err)
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
	_, err = e.keys.Import(keystore.ImportSet{Keys: keys}, false, perr)
	if got := problemtest.InvalidRequest(t, err); len(got) != keystore.MaxImportProblems+1 || got[keystore.MaxImportProblems] != "lines:too_many" {
		t.Errorf("%d problems, the last %q", len(got), got[len(got)-1])
	}

	lines = lines[:0]
	for i := range keystore.MaxImport + 1 {
		lines = append(lines, fmt.Sprintf(`{"service":"share","name":"k%d","owner":"o","privileges":["get"]}`, i))
	}
	keys, perr = ParseJSONL([]byte(strings.Join(lines, "\n")), "")
	if len(keys) != keystore.MaxImport || !slices.Contains(problemtest.InvalidRequest(t, perr), "lines:too_many") {
		t.Errorf("%d keys read of %d lines", len(keys), keystore.MaxImport+1)
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
				_, err = e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil)
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
	if _, err := e.keys.Import(keystore.ImportSet{Keys: keys}, false, nil); err != nil {
		t.Fatal(err)
	}
	mine := mustCreate(t, e.keys, `{`+validContracts+`}`)
	for path, want := range map[string]string{
		"/webapi/share/foreign-token-in-a-path":          "/webapi/share/[redacted]",
		"/webapi/share/foreign-token-in-a-path/activity": "/webapi/share/[redacted]/activity",
		"/webapi/contracts/" + mine.Token:                "/webapi/contracts/kg_[redacted]",
		"/webapi/share/not-a-token-of-any-key-here":      "/webapi/share/not-a-token-of-any-key-here",
		// Inside a segment, between characters tokens rarely hold.
		"/webapi/share/Bearer foreign-token-in-a-path": "/webapi/share/Bearer [redacted]",
		"/webapi/share/foreign-token-in-a-path.json":   "/webapi/share/[redacted].json",
		"/webapi/share/x;foreign-token-in-a-path;y":    "/webapi/share/x;[redacted];y",
		"/webapi/share/a.foreign-token-in-a-path/b":    "/webapi/share/a.[redacted]/b",
		"/webapi/share/x.not-a-token-of-any-key-here":  "/webapi/share/x.not-a-token-of-any-key-here",
		// keygate's own, its prefix in another case or left out.
		"/webapi/contracts/KG_" + mine.Token[3:]:                 "/webapi/contracts/KG_[redacted]",
		"/webapi/contracts/" + mine.Token[3:]:                    "/webapi/contracts/[redacted]",
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
		if _, err := e.keys.Import(keystore.ImportSet{Keys: stored}, false, nil); err != nil {
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
		if got := problemtest.InvalidRequest(t, err); !slices.Equal(got, want) {
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
