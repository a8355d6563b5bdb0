package keystore

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"

	"github.com/keygate/keygate/internal/problem"
)

// refusals are the codes and statuses the key check may answer; anything
// else (a 5xx above all) is a defect.
var refusals = map[string]int{
	problem.CodeMissingKey:       http.StatusUnauthorized,
	problem.CodeInvalidKey:       http.StatusUnauthorized,
	problem.CodeKeyNotValid:      http.StatusUnauthorized,
	problem.CodeIPNotAllowed:     http.StatusForbidden,
	problem.CodeNotFound:         http.StatusNotFound,
	problem.CodeMethodNotAllowed: http.StatusMethodNotAllowed,
	problem.CodeMissingPrivilege: http.StatusForbidden,
}

// FuzzAuthorize feeds the key check arbitrary Authorization headers,
// client addresses, methods and paths. Property: no panic, every refusal
// a documented 4xx code, and only the exact token of a live key (scheme
// in any case, surrounding blanks trimmed) is ever authorized. The
// check changes nothing, so the stored keys are compared afterwards.
func FuzzAuthorize(f *testing.F) {
	e := newEnv(f, storetest.OpenBolt(f))
	open := mustCreate(f, e.keys, `{"service":"contracts","name":"open","owner":"alice","privileges":["search","get"]}`)
	fenced := mustCreate(f, e.keys, `{"service":"contracts","name":"fenced","owner":"bob","privileges":["create"],
		"allowedIps":["10.0.0.0/8","2001:db8::/32"],"notValidAfter":"2026-03-02T12:00:00Z"}`)
	other := mustCreate(f, e.keys, `{"service":"share","name":"share","owner":"carol","privileges":["list"]}`)
	// Keys outside their validity window at the clock's t0: never
	// authorized, whatever the header, address or route.
	expired := mustCreate(f, e.keys, `{"service":"contracts","name":"expired","owner":"dan","privileges":["search","get","create"],
		"notValidAfter":"2026-03-01T11:59:59Z"}`)
	early := mustCreate(f, e.keys, `{"service":"contracts","name":"early","owner":"eve","privileges":["search","get","create"],
		"notValidBefore":"2026-03-01T12:00:01Z"}`)
	tokens := map[string]Key{open.Token: open, fenced.Token: fenced, other.Token: other}
	before := e.keys.List("")

	for _, s := range []struct{ header, ip, method, path string }{
		{"Bearer " + open.Token, "192.0.2.1", "GET", "/webapi/contracts"},
		{"bearer " + open.Token + "  ", "192.0.2.1", "GET", "/webapi/contracts/x"},
		{"Bearer " + open.Token, "192.0.2.1", "POST", "/webapi/contracts"},
		{"Bearer " + fenced.Token, "10.1.2.3", "POST", "/webapi/contracts"},
		{"Bearer " + fenced.Token, "::ffff:10.1.2.3", "POST", "/webapi/contracts"},
		{"Bearer " + fenced.Token, "fe80::1%eth0", "POST", "/webapi/contracts"},
		{"Bearer " + other.Token, "192.0.2.1", "GET", "/webapi/contracts"},
		{"", "", "", ""},
		{"Bearer", "192.0.2.1", "GET", "/webapi/contracts"},
		{"Bearer ", "192.0.2.1", "GET", "/webapi/contracts"},
		{"Basic dXNlcjpwYXNz", "192.0.2.1", "GET", "/webapi/contracts"},
		{"Bearer kg_\x00\xff", "192.0.2.1", "GET", "/webapi/contracts"},
		{"Bearer " + open.Token[:len(open.Token)-1], "192.0.2.1", "GET", "/webapi/contracts"},
		{"Bearer " + open.Token + "\nBearer " + open.Token, "192.0.2.1", "GET", "/webapi/contracts"},
		{"Bearer " + open.Token, "192.0.2.1", "GET", "/webapi/contracts/../share"},
		{"Bearer " + open.Token, "192.0.2.1", "GET", "//webapi/contracts/%2e%2e/"},
		{"Bearer " + expired.Token, "192.0.2.1", "GET", "/webapi/contracts"},
		{"Bearer " + early.Token, "192.0.2.1", "POST", "/webapi/contracts"},
		{"Bearer " + fenced.Token, "11.0.0.1", "POST", "/webapi/contracts"},
		{"Bearer " + fenced.Token, "2001:db9::1", "POST", "/webapi/contracts"},
		{"Bearer " + open.Token, "192.0.2.1", "HEAD", "/webapi/contracts/x/attachments/y"},
		{"Bearer " + open.Token, "192.0.2.1", "PATCH", "/webapi/contracts/x"},
	} {
		f.Add(s.header, s.ip, s.method, s.path)
	}
	f.Fuzz(func(t *testing.T, header, ip, method, path string) {
		// A newline splits the header into several values, as a client
		// that repeats Authorization sends them.
		var values []string
		if header != "" {
			values = strings.Split(header, "\n")
		}
		addr, _ := netip.ParseAddr(ip)
		req := &Request{Service: access.ServiceContracts, Authorization: values, ClientIP: addr,
			Method: method, Path: path, Now: e.clock.Now()}
		d := Authorize(req, &contracts.Operations, e.keys.Lookup)
		if d.Authorized() {
			if len(values) != 1 {
				t.Fatalf("authorized %d Authorization values", len(values))
			}
			scheme, token, _ := strings.Cut(values[0], " ")
			k, ok := tokens[strings.TrimSpace(token)]
			if !strings.EqualFold(scheme, "bearer") || !ok || k.Service != access.ServiceContracts {
				t.Fatalf("authorized %q", values[0])
			}
			if d.Operation == nil || !d.Entry.snap.Load().has(d.Operation.Privilege) {
				t.Fatalf("authorized %s %s without its privilege", method, path)
			}
			if m := d.Operation.Method; m != method && (m != http.MethodGet || method != http.MethodHead) {
				t.Fatalf("authorized %s %s as %s %s", method, path, m, d.Operation.Pattern)
			}
			if k.ID == fenced.ID && !fencedNet4.Contains(addr.Unmap().WithZone("")) && !fencedNet6.Contains(addr.WithZone("")) {
				t.Fatalf("authorized the fenced key from %q", ip)
			}
			if d.Key().ID != k.ID {
				t.Fatalf("the token of %s authorized as %s", k.ID, d.Key().ID)
			}
			return
		}
		if want, ok := refusals[d.Reason]; !ok || d.Status != want {
			t.Fatalf("refusal %d %q is not a documented one", d.Status, d.Reason)
		}
		if d.Reason == problem.CodeMethodNotAllowed && len(d.Allow) == 0 {
			t.Fatal("405 without Allow")
		}
	})
	if after := e.keys.List(""); !reflect.DeepEqual(after, before) {
		f.Fatalf("the key check changed the keys: %v, then %v", before, after)
	}
}

// The ranges of FuzzAuthorize's fenced key.
var (
	fencedNet4 = netip.MustParsePrefix("10.0.0.0/8")
	fencedNet6 = netip.MustParsePrefix("2001:db8::/32")
)

// FuzzAllowedIPs creates keys whose allowedIps are the fuzzed lines.
// Property: no panic; a refusal is a 400 invalid_request naming the bad
// entries and stores nothing; an accepted list is stored normalized, each
// entry parses again to itself, and every entry is enforced (none is
// silently dropped, which would fence the key more than was asked, or,
// for an empty result, not at all).
func FuzzAllowedIPs(f *testing.F) {
	e := newEnv(f, storetest.OpenBolt(f))
	// Each accepted input creates and deletes a key: without fsync the
	// fuzzer (and its minimizer) runs a hundred times faster.
	e.db.(*boltdb.DB).Bolt.NoSync = true
	for _, s := range []string{
		"10.0.0.0/8", "10.1.2.3", "10.1.2.3/8", " 192.0.2.1 ", "2001:db8::1", "2001:DB8::/32",
		"::ffff:10.0.0.1", "::ffff:10.0.0.0/104", "::ffff:0:0/95", "::ffff:0:0/96", "::/0", "0.0.0.0/0",
		"fe80::1%eth0", "fe80::/10%eth0", "10.0.0.0/33", "10.0.0.0/-1", "10.0.0.0/08", "010.0.0.1",
		"1.2.3.4.5", "", "   ", "\xff", "10.0.0.0/8\n2001:db8::/129", "::ffff:1.2.3.4/128",
		"1.2.3.4/32\n1.2.3.4", "*", "localhost", "1.2.3.4:80", "[::1]",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lines string) {
		list := strings.Split(lines, "\n")
		body, err := json.Marshal(map[string]any{"service": "contracts", "name": "fuzz", "owner": "alice",
			"privileges": []string{"get"}, "allowedIps": list})
		if err != nil {
			t.Fatal(err)
		}
		in := new(KeyInput)
		if err := json.Unmarshal(body, in); err != nil {
			t.Fatal(err)
		}
		n := e.keys.Count(access.ServiceContracts)
		k, err := e.keys.Create(in)
		if err != nil {
			var d *problem.Details
			if !errors.As(err, &d) || d.Status != http.StatusBadRequest || d.Code != problem.CodeInvalidRequest || len(d.Errors) == 0 {
				t.Fatalf("Create(%q): %v, want a 400 invalid_request listing fields", list, err)
			}
			for _, fe := range d.Errors {
				if !strings.HasPrefix(fe.Field, "allowedIps") {
					t.Fatalf("Create(%q): field %s refused", list, fe.Field)
				}
			}
			if got := e.keys.Count(access.ServiceContracts); got != n {
				t.Fatalf("a refused create stored a key: %d keys, then %d", n, got)
			}
			return
		}
		defer e.keys.Delete(k.ID)
		stored, err := e.keys.Get(k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(stored.AllowedIPs) != len(list) {
			t.Fatalf("%q stored as %q", list, stored.AllowedIPs)
		}
		c := e.keys.entry(k.ID).snap.Load()
		if len(c.prefixes) != len(stored.AllowedIPs) || !c.restricted {
			t.Fatalf("%q: %d of %d entries enforced", stored.AllowedIPs, len(c.prefixes), len(stored.AllowedIPs))
		}
		for i, s := range stored.AllowedIPs {
			p, ok := parseRange(s)
			if !ok {
				t.Fatalf("stored entry %q does not parse", s)
			}
			if again := normalRange(p); again != s {
				t.Fatalf("stored entry %q normalizes to %q", s, again)
			}
			// The range's own address is let in.
			if !c.allows(p.Addr()) {
				t.Fatalf("entry %d %q does not admit %s", i, s, p.Addr())
			}
		}
	})
}

// normalRange is the stored form of a parsed range, as checkRanges writes it.
func normalRange(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.String()
}
