package keystore

import (
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"

	"github.com/keygate/keygate/internal/problem"
)

// TestAuthorize walks the steps of docs/clients.md "Checking a request" in
// order, on both services' operation tables.
func TestAuthorize(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		nvb, nva := t0.Add(time.Hour), t0.Add(2*time.Hour)
		created := map[string]Key{}
		for name, body := range map[string]string{
			"cAll": `{"service":"contracts","name":"c-all","owner":"alice","privileges":["get","search","create","archive","delete"]}`,
			"cGet": `{"service":"contracts","name":"c-get","owner":"bob","privileges":["get"]}`,
			"cWin": `{"service":"contracts","name":"c-win","owner":"carol","privileges":["get","search"],
				"notValidBefore":"` + nvb.Format(time.RFC3339) + `","notValidAfter":"` + nva.Format(time.RFC3339) + `",
				"allowedIps":["203.0.113.0/24"]}`,
			"cIPs": `{"service":"contracts","name":"c-ips","owner":"dave","privileges":["get"],
				"allowedIps":["192.0.2.10","198.51.100.0/24","2001:db8::1","2001:db8:1::/48","fe80::/64","::ffff:10.1.0.0/112"]}`,
			"cGone":   `{"service":"contracts","name":"c-gone","owner":"eve","privileges":["get","search"]}`,
			"sAll":    `{"service":"share","name":"s-all","owner":"frank","privileges":["get","list","create","delete"],"adminProjects":["p1","p2"]}`,
			"sCreate": `{"service":"share","name":"s-create","owner":"grace","privileges":["create"]}`,
			"sGet":    `{"service":"share","name":"s-get","owner":"heidi","privileges":["get"]}`,
		} {
			created[name] = mustCreate(t, e.keys, body)
		}
		if err := e.keys.Delete(created["cGone"].ID); err != nil {
			t.Fatal(err)
		}
		byID := map[string]string{}
		for name, k := range created {
			byID[k.ID] = name
		}
		tokens := strings.NewReplacer(
			"{cAll}", created["cAll"].Token, "{cGet}", created["cGet"].Token,
			"{cWin}", created["cWin"].Token, "{cIPs}", created["cIPs"].Token,
			"{cGone}", created["cGone"].Token, "{sAll}", created["sAll"].Token,
			"{sCreate}", created["sCreate"].Token, "{sGet}", created["sGet"].Token,
			"{unknown}", token.New(),
		)
		// A well-formed token with the wrong prefix.
		wrongPrefix := "xx_" + created["cAll"].Token[3:]

		const (
			C = access.ServiceContracts
			S = access.ServiceShare
		)
		anyIP := "192.0.2.200"
		inWin := "203.0.113.9"
		tests := []struct {
			name    string
			service access.Service
			auth    []string // nil: no header
			ip      string   // "": the zero (invalid) address
			method  string
			path    string
			now     time.Time // zero: t0
			// want
			status  int    // 0: authorized
			reason  string // "": authorized
			key     string // the key the decision names; "": none
			op      string // the operation the decision names; "": none
			allow   []string
			missing access.Privilege
		}{
			// 1. The header.
			{name: "no header", service: C, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeMissingKey},
			{name: "empty header list", service: C, auth: []string{}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeMissingKey},
			{name: "two headers", service: C, auth: []string{"Bearer {cAll}", "Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "basic scheme", service: C, auth: []string{"Basic {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "no scheme", service: C, auth: []string{"{cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "scheme without space", service: C, auth: []string{"Bearer{cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "lowercase bearer accepted", service: C, auth: []string{"bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				key: "cAll", op: "search"},
			{name: "uppercase BEARER accepted", service: C, auth: []string{"BEARER {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				key: "cAll", op: "search"},
			{name: "scheme only", service: C, auth: []string{"Bearer"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "empty token", service: C, auth: []string{"Bearer    "}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			// 2. The key.
			{name: "malformed token short", service: C, auth: []string{"Bearer kg_abc"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "malformed token wrong prefix", service: C, auth: []string{"Bearer " + wrongPrefix}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "malformed token one char more", service: C, auth: []string{"Bearer {cAll}A"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "two tokens", service: C, auth: []string{"Bearer {cAll} {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "unknown token", service: C, auth: []string{"Bearer {unknown}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "deleted key", service: C, auth: []string{"Bearer {cGone}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "share key on contracts", service: C, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 401, reason: problem.CodeInvalidKey},
			{name: "contracts key on share", service: S, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/share",
				status: 401, reason: problem.CodeInvalidKey},
			// 3. The validity window, bounds included.
			{name: "before notValidBefore", service: C, auth: []string{"Bearer {cWin}"}, ip: inWin, method: "GET", path: "/webapi/contracts",
				now: nvb.Add(-time.Nanosecond), status: 401, reason: problem.CodeKeyNotValid, key: "cWin"},
			{name: "exactly notValidBefore", service: C, auth: []string{"Bearer {cWin}"}, ip: inWin, method: "GET", path: "/webapi/contracts",
				now: nvb, key: "cWin", op: "search"},
			{name: "exactly notValidAfter", service: C, auth: []string{"Bearer {cWin}"}, ip: inWin, method: "GET", path: "/webapi/contracts",
				now: nva, key: "cWin", op: "search"},
			{name: "after notValidAfter", service: C, auth: []string{"Bearer {cWin}"}, ip: inWin, method: "GET", path: "/webapi/contracts",
				now: nva.Add(time.Nanosecond), status: 401, reason: problem.CodeKeyNotValid, key: "cWin"},
			{name: "window in another zone", service: C, auth: []string{"Bearer {cWin}"}, ip: inWin, method: "GET", path: "/webapi/contracts",
				now: nvb.In(time.FixedZone("X", -5*3600)), key: "cWin", op: "search"},
			// Step order: the earliest failing step decides.
			{name: "order: window before IP and route", service: C, auth: []string{"Bearer {cWin}"}, ip: "10.0.0.1", method: "PUT", path: "/webapi/contracts/x/y",
				now: t0, status: 401, reason: problem.CodeKeyNotValid, key: "cWin"},
			{name: "order: IP before route", service: C, auth: []string{"Bearer {cWin}"}, ip: "10.0.0.1", method: "PUT", path: "/webapi/contracts/x/y",
				now: nvb, status: 403, reason: problem.CodeIPNotAllowed, key: "cWin"},
			{name: "order: service before window", service: S, auth: []string{"Bearer {cWin}"}, ip: "10.0.0.1", method: "GET", path: "/webapi/share",
				now: t0, status: 401, reason: problem.CodeInvalidKey},
			{name: "order: route 404 before privilege", service: C, auth: []string{"Bearer {cGet}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/x/y",
				status: 404, reason: problem.CodeNotFound, key: "cGet"},
			{name: "order: route 405 before privilege", service: C, auth: []string{"Bearer {cGet}"}, ip: anyIP, method: "PUT", path: "/webapi/contracts/x",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "cGet", allow: []string{"GET", "HEAD", "PATCH", "DELETE"}},
			// 4. The client address.
			{name: "ipv4 address listed", service: C, auth: []string{"Bearer {cIPs}"}, ip: "192.0.2.10", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4 address next to listed", service: C, auth: []string{"Bearer {cIPs}"}, ip: "192.0.2.11", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "ipv4 range first", service: C, auth: []string{"Bearer {cIPs}"}, ip: "198.51.100.0", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4 range last", service: C, auth: []string{"Bearer {cIPs}"}, ip: "198.51.100.255", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4 outside range", service: C, auth: []string{"Bearer {cIPs}"}, ip: "198.51.101.0", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "ipv4-mapped client, listed address", service: C, auth: []string{"Bearer {cIPs}"}, ip: "::ffff:192.0.2.10", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4-mapped client, in range", service: C, auth: []string{"Bearer {cIPs}"}, ip: "::ffff:198.51.100.7", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4-mapped client, outside", service: C, auth: []string{"Bearer {cIPs}"}, ip: "::ffff:192.0.2.11", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "ipv4-mapped range in list", service: C, auth: []string{"Bearer {cIPs}"}, ip: "10.1.200.3", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4-mapped range in list, outside", service: C, auth: []string{"Bearer {cIPs}"}, ip: "10.2.0.1", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "ipv6 address listed", service: C, auth: []string{"Bearer {cIPs}"}, ip: "2001:db8::1", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv6 address not listed", service: C, auth: []string{"Bearer {cIPs}"}, ip: "2001:db8::2", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "ipv6 in range", service: C, auth: []string{"Bearer {cIPs}"}, ip: "2001:db8:1:ffff::5", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv6 outside range", service: C, auth: []string{"Bearer {cIPs}"}, ip: "2001:db8:2::", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "ipv6 link-local with zone in range", service: C, auth: []string{"Bearer {cIPs}"}, ip: "fe80::1%eth0", method: "GET", path: "/webapi/contracts/a",
				key: "cIPs", op: "get"},
			{name: "ipv4 client, ipv6-only match impossible", service: C, auth: []string{"Bearer {cIPs}"}, ip: "32.1.13.184", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "invalid client address with a list", service: C, auth: []string{"Bearer {cIPs}"}, ip: "", method: "GET", path: "/webapi/contracts/a",
				status: 403, reason: problem.CodeIPNotAllowed, key: "cIPs"},
			{name: "empty list: any ipv6", service: C, auth: []string{"Bearer {cAll}"}, ip: "2001:db8:ffff::1", method: "GET", path: "/webapi/contracts/a",
				key: "cAll", op: "get"},
			{name: "empty list: even invalid address", service: C, auth: []string{"Bearer {cAll}"}, ip: "", method: "GET", path: "/webapi/contracts/a",
				key: "cAll", op: "get"},
			// 5. The route: contracts.
			{name: "contracts search", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts", key: "cAll", op: "search"},
			{name: "contracts search HEAD", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "HEAD", path: "/webapi/contracts", key: "cAll", op: "search"},
			{name: "contracts create", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "POST", path: "/webapi/contracts", key: "cAll", op: "create"},
			{name: "contracts get", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/c1", key: "cAll", op: "get"},
			{name: "contracts get HEAD", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "HEAD", path: "/webapi/contracts/c1", key: "cAll", op: "get"},
			{name: "contracts archive", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "PATCH", path: "/webapi/contracts/c1", key: "cAll", op: "archive"},
			{name: "contracts delete", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "DELETE", path: "/webapi/contracts/c1", key: "cAll", op: "delete"},
			{name: "contracts attachment", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/c1/attachments/a1", key: "cAll", op: "attachment"},
			{name: "contracts 405 on collection", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "PUT", path: "/webapi/contracts",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "cAll", allow: []string{"GET", "HEAD", "POST"}},
			{name: "contracts 405 on item", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "POST", path: "/webapi/contracts/c1",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "cAll", allow: []string{"GET", "HEAD", "PATCH", "DELETE"}},
			{name: "contracts 405 on attachment", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "DELETE", path: "/webapi/contracts/c1/attachments/a1",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "cAll", allow: []string{"GET", "HEAD"}},
			{name: "contracts unknown sub-path", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/c1/signers",
				status: 404, reason: problem.CodeNotFound, key: "cAll"},
			{name: "contracts attachments without id", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/c1/attachments",
				status: 404, reason: problem.CodeNotFound, key: "cAll"},
			{name: "contracts trailing slash", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/",
				status: 404, reason: problem.CodeNotFound, key: "cAll"},
			{name: "contracts empty id segment", service: C, auth: []string{"Bearer {cAll}"}, ip: anyIP, method: "GET", path: "/webapi/contracts//attachments/a1",
				status: 404, reason: problem.CodeNotFound, key: "cAll"},
			// 5. The route: share.
			{name: "share list", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "GET", path: "/webapi/share", key: "sAll", op: "list"},
			{name: "share get", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "GET", path: "/webapi/share/u1", key: "sAll", op: "get"},
			{name: "share delete", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "DELETE", path: "/webapi/share/u1", key: "sAll", op: "delete"},
			{name: "share 405 on collection", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "OPTIONS", path: "/webapi/share",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "sAll", allow: []string{"GET", "HEAD", "POST"}},
			{name: "share 405 on item", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "PATCH", path: "/webapi/share/u1",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "sAll", allow: []string{"GET", "HEAD", "PUT", "DELETE"}},
			{name: "share 405 on activity", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "POST", path: "/webapi/share/u1/activity",
				status: 405, reason: problem.CodeMethodNotAllowed, key: "sAll", allow: []string{"GET", "HEAD"}},
			{name: "share unknown path", service: S, auth: []string{"Bearer {sAll}"}, ip: anyIP, method: "GET", path: "/webapi/share/u1/files",
				status: 404, reason: problem.CodeNotFound, key: "sAll"},
			// 6. The privilege; share's create grants update, get grants activity.
			{name: "share create grants create", service: S, auth: []string{"Bearer {sCreate}"}, ip: anyIP, method: "POST", path: "/webapi/share", key: "sCreate", op: "create"},
			{name: "share create grants update", service: S, auth: []string{"Bearer {sCreate}"}, ip: anyIP, method: "PUT", path: "/webapi/share/u1", key: "sCreate", op: "update"},
			{name: "share create does not grant get", service: S, auth: []string{"Bearer {sCreate}"}, ip: anyIP, method: "GET", path: "/webapi/share/u1",
				status: 403, reason: problem.CodeMissingPrivilege, key: "sCreate", op: "get", missing: access.PrivGet},
			{name: "share create does not grant activity", service: S, auth: []string{"Bearer {sCreate}"}, ip: anyIP, method: "GET", path: "/webapi/share/u1/activity",
				status: 403, reason: problem.CodeMissingPrivilege, key: "sCreate", op: "activity", missing: access.PrivGet},
			{name: "share get grants activity", service: S, auth: []string{"Bearer {sGet}"}, ip: anyIP, method: "GET", path: "/webapi/share/u1/activity", key: "sGet", op: "activity"},
			{name: "share get grants activity HEAD", service: S, auth: []string{"Bearer {sGet}"}, ip: anyIP, method: "HEAD", path: "/webapi/share/u1/activity", key: "sGet", op: "activity"},
			{name: "share get does not grant update", service: S, auth: []string{"Bearer {sGet}"}, ip: anyIP, method: "PUT", path: "/webapi/share/u1",
				status: 403, reason: problem.CodeMissingPrivilege, key: "sGet", op: "update", missing: access.PrivCreate},
			{name: "share get does not grant list", service: S, auth: []string{"Bearer {sGet}"}, ip: anyIP, method: "GET", path: "/webapi/share",
				status: 403, reason: problem.CodeMissingPrivilege, key: "sGet", op: "list", missing: access.PrivList},
			{name: "contracts get lacks search", service: C, auth: []string{"Bearer {cGet}"}, ip: anyIP, method: "GET", path: "/webapi/contracts",
				status: 403, reason: problem.CodeMissingPrivilege, key: "cGet", op: "search", missing: access.PrivSearch},
			{name: "contracts get lacks delete", service: C, auth: []string{"Bearer {cGet}"}, ip: anyIP, method: "DELETE", path: "/webapi/contracts/c1",
				status: 403, reason: problem.CodeMissingPrivilege, key: "cGet", op: "delete", missing: access.PrivDelete},
			{name: "contracts get grants attachment", service: C, auth: []string{"Bearer {cGet}"}, ip: anyIP, method: "GET", path: "/webapi/contracts/c1/attachments/a1",
				key: "cGet", op: "attachment"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				table := &contracts.Operations
				if tt.service == access.ServiceShare {
					table = &share.Operations
				}
				var auth []string
				if tt.auth != nil {
					auth = make([]string, len(tt.auth))
					for i, a := range tt.auth {
						auth[i] = tokens.Replace(a)
					}
				}
				var ip netip.Addr
				if tt.ip != "" {
					ip = netip.MustParseAddr(tt.ip)
				}
				now := tt.now
				if now.IsZero() {
					now = t0
				}
				req := &Request{Service: tt.service, Authorization: auth, ClientIP: ip, Method: tt.method, Path: tt.path, Now: now}
				d := Authorize(req, table, e.keys.Lookup)

				if d.Reason != tt.reason {
					t.Fatalf("reason %q (status %d), want %q", d.Reason, d.Status, tt.reason)
				}
				if d.Authorized() != (tt.reason == "") {
					t.Errorf("Authorized() = %v with reason %q", d.Authorized(), d.Reason)
				}
				if tt.reason != "" && d.Status != tt.status {
					t.Errorf("status %d, want %d", d.Status, tt.status)
				}
				gotKey := ""
				if d.Entry != nil {
					gotKey = byID[d.Key().ID]
				}
				if gotKey != tt.key {
					t.Errorf("decision names key %q, want %q", gotKey, tt.key)
				}
				gotOp := ""
				if d.Operation != nil {
					gotOp = d.Operation.Name
				}
				if gotOp != tt.op {
					t.Errorf("operation %q, want %q", gotOp, tt.op)
				}
				if !reflect.DeepEqual(d.Allow, tt.allow) {
					t.Errorf("Allow %v, want %v", d.Allow, tt.allow)
				}
				if d.Missing != tt.missing {
					t.Errorf("Missing %q, want %q", d.Missing, tt.missing)
				}
				if d.Authorized() {
					want := created[tt.key]
					id := d.Identity()
					if id.KeyID != want.ID || id.KeyName != want.Name || id.Owner != want.Owner || id.Service != want.Service ||
						id.Operation != tt.op || !reflect.DeepEqual(id.Privileges, want.Privileges) ||
						!reflect.DeepEqual(id.AdminProjects, want.AdminProjects) {
						t.Errorf("Identity() = %+v, want key %+v with operation %q", id, want, tt.op)
					}
				}
			})
		}

		// Authorize decides; it never counts a use.
		for _, k := range e.keys.List("") {
			if k.UsageCount != 0 || k.LastUsageTime != nil {
				t.Errorf("key %s: Authorize changed usage to %d, %v", k.Name, k.UsageCount, k.LastUsageTime)
			}
		}
		if created["sAll"].AdminProjects == nil {
			t.Fatal("share key lost its adminProjects") // so the Identity check above compared something
		}
	})
}

// TestAuthorizeSeesChanges proves that an update or delete takes effect on
// the very next check.
func TestAuthorizeSeesChanges(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"k","owner":"o","privileges":["get","search"]}`)
		check := func() Decision {
			return Authorize(&Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + k.Token},
				ClientIP: netip.MustParseAddr("192.0.2.1"), Method: http.MethodGet, Path: "/webapi/contracts", Now: t0},
				&contracts.Operations, e.keys.Lookup)
		}
		if d := check(); !d.Authorized() {
			t.Fatalf("fresh key refused: %s", d.Reason)
		}
		if _, err := e.keys.Update(k.ID, input(t, `{"privileges":["get"]}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Reason != problem.CodeMissingPrivilege || d.Missing != access.PrivSearch {
			t.Fatalf("after dropping search: %q missing %q", d.Reason, d.Missing)
		}
		if _, err := e.keys.Update(k.ID, input(t, `{"privileges":["search"],"allowedIps":["198.51.100.0/24"]}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Reason != problem.CodeIPNotAllowed {
			t.Fatalf("after restricting addresses: %q", d.Reason)
		}
		if _, err := e.keys.Update(k.ID, input(t, `{"allowedIps":[],"notValidAfter":"2026-03-01T11:59:59Z"}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Reason != problem.CodeKeyNotValid {
			t.Fatalf("after expiring: %q", d.Reason)
		}
		if _, err := e.keys.Update(k.ID, input(t, `{"notValidAfter":null}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(); !d.Authorized() {
			t.Fatalf("after clearing notValidAfter: %q", d.Reason)
		}
		// Disabled: refused at once, with the usage kept; enabled again,
		// it works as before.
		e.keys.Use(check().Entry, t0)
		if _, err := e.keys.Update(k.ID, input(t, `{"enabled":false}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Reason != problem.CodeKeyDisabled || d.Status != http.StatusUnauthorized {
			t.Fatalf("after disabling: %d %q", d.Status, d.Reason)
		}
		if g, _ := e.keys.Get(k.ID); g.Enabled || g.UsageCount != 1 {
			t.Fatalf("disabled key: %+v", g)
		}
		if _, err := e.keys.Update(k.ID, input(t, `{"enabled":true}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(); !d.Authorized() {
			t.Fatalf("after enabling again: %q", d.Reason)
		}
		if err := e.keys.Delete(k.ID); err != nil {
			t.Fatal(err)
		}
		if d := check(); d.Reason != problem.CodeInvalidKey || d.Status != http.StatusUnauthorized {
			t.Fatalf("after delete: %d %q", d.Status, d.Reason)
		}
	})
}
