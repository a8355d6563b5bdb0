package caddymodule

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/keygate/keygate/caddymodule/auditlog"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

// inCaddyRecords are audit entries of several shapes (the auditlog
// package's tests go through every shape and string).
func inCaddyRecords() []auditlog.Record {
	at := time.Date(2026, 11, 23, 14, 48, 34, 613085123, time.UTC)
	var recs []auditlog.Record
	for i := range 300 {
		recs = append(recs,
			auditlog.Record{At: at.Add(time.Duration(i) * time.Millisecond), Msg: "key used", KeyID: "01JDX6J5B8Q4Z0KQ1T3N2M7R9S",
				KeyName: "bench \"q\"", Owner: "Zoë\xff", ConsumerID: "acme", PlanID: "gold", Service: "contracts",
				Operation: "contracts.get", Method: "GET", Path: fmt.Sprintf("/webapi/contracts/%d", i),
				ClientIP: netip.MustParseAddr("203.0.113.7"), Status: 200, Duration: time.Duration(i) * time.Microsecond},
			auditlog.Record{At: at, Msg: "key refused", Service: "share", Operation: "none", Method: "POST",
				Path: "/webapi/share/kg_abcdefghijklmnopqrstuvwxyz0123456789ABCD/x", ClientIP: netip.MustParseAddr("fe80::1%eth0"),
				Status: 429, Reason: "rate_limited", Duration: 0, Refusals: uint64(i), PreviousToken: i%2 == 0},
			auditlog.Record{At: at, Msg: "keys imported", User: "admin", Service: "contracts", Operation: "admin", Method: "POST",
				Path: "/webapi/keys/import", Status: 200, Duration: -1, Imported: i, ImportFormat: "kong", NewConsumers: 1, NewPlans: 2},
		)
	}
	return recs
}

// In Caddy, the audit log's file holds what Caddy's `format json`
// writes of its entries, with the log block of the default Caddyfile
// (`format webapi_json`), with `format json`, with webapi_json wrapped
// in a filter, and in two logs at once.
func TestAuditInCaddy(t *testing.T) {
	const auditLog = "log webapi_audit {\n\t\toutput buffered_file %[1]s/audit.log\n\t\tformat webapi_json\n\t\tinclude webapi.audit\n\t}\n"
	const defaultLog = "log default {\n\t\toutput file %[1]s/caddy.log\n\t\tformat json\n\t\texclude webapi.audit\n\t}\n"
	for _, c := range []struct {
		name, logs string
		files      []string
	}{
		{"default Caddyfile", auditLog + defaultLog, []string{"audit.log"}},
		{"format json", strings.Replace(auditLog, "webapi_json", "json", 1) + defaultLog, []string{"audit.log"}},
		{"filter wrapping webapi_json", strings.Replace(auditLog, "format webapi_json",
			"format filter {\n\t\t\twrap webapi_json\n\t\t\tfields {\n\t\t\t\tuser delete\n\t\t\t}\n\t\t}", 1) + defaultLog, []string{"audit.log"}},
		{"in two logs", auditLog + strings.NewReplacer("webapi_audit", "audit_copy", "audit.log", "audit-copy.log",
			"webapi_json", "json").Replace(auditLog) + defaultLog, []string{"audit.log", "audit-copy.log"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			tester := caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: TestAdminPort})
			// Before the directory goes: a config without the webapi app
			// closes its database and logs.
			t.Cleanup(func() { tester.InitServer(fmt.Sprintf("{\n\tadmin localhost:%d\n}\n", TestAdminPort), "caddyfile") })
			tester.InitServer(fmt.Sprintf(`{
	admin localhost:%[2]d
	http_port %[3]d
	https_port %[4]d
	webapi {
		data_dir %[1]s
	}
	`+c.logs+`}
http://localhost:%[3]d {
	respond "ok"
}`, dir, TestAdminPort, TestSitePort, TestSitePort+363), "caddyfile")
			v, err := caddy.ActiveContext().App("webapi")
			if err != nil {
				t.Fatal(err)
			}
			a := v.(*App).audit
			recs := inCaddyRecords()
			for _, rec := range recs {
				a.Add(rec)
			}
			// What `format json` writes, through zap, of the same entries.
			enc := &logging.JSONEncoder{}
			if err := enc.Provision(caddy.Context{}); err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			ref := auditlog.New(zap.New(zapcore.NewCore(enc, zapcore.AddSync(&b), zapcore.InfoLevel)).Named("webapi.audit"))
			for _, rec := range recs {
				if strings.Contains(c.name, "filter") {
					rec.User = ""
				}
				ref.Add(rec)
			}
			ref.Close()
			want := b.String()
			for _, name := range c.files {
				deadline := time.Now().Add(testwait.Generous)
				for {
					got, _ := os.ReadFile(filepath.Join(dir, name))
					if string(got) == want {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s holds %d bytes, not the %d `format json` writes:\n%.600s\nwant\n%.600s", name, len(got), len(want), got, want)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}
