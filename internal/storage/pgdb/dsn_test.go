package pgdb

import (
	"strings"
	"testing"
)

// TestRedact: every DSN shape pgx accepts, and some it refuses, is shown
// as its server and database, and no part of its user information ever
// appears, whatever a misplaced '@', '/' or '?' does to the parse.
func TestRedact(t *testing.T) {
	for _, tc := range []struct {
		name, dsn, want string
		secrets         []string // none may appear in Redact's output
		checkErr        bool     // CheckDSN refuses it
	}{
		{"url", "postgres://keygate:Pg-S3cr3t@127.0.0.1:5432/keygate?sslmode=disable",
			"postgres://127.0.0.1:5432/keygate", []string{"keygate:", "Pg-S3cr3t"}, false},
		{"url, '@' in the password", "postgres://keygate:Pg-S3cr3t@Zq9xW@127.0.0.1:5432/keygate",
			"postgres://127.0.0.1:5432/keygate", []string{"Pg-S3cr3t", "Zq9xW"}, true},
		{"url, '@' percent-encoded", "postgres://keygate:Pg-S3cr3t%40Zq9xW@127.0.0.1/keygate",
			"postgres://127.0.0.1/keygate", []string{"Pg-S3cr3t", "Zq9xW", "%40"}, false},
		{"url, '/' in the password", "postgres://u5er:12/34x@db.example/app",
			"postgres://db.example/app", []string{"u5er", "12", "34x"}, true},
		{"url, '?' in the password", "postgres://u5er:ab?cdXY@db.example/app",
			"postgres://db.example/app", []string{"u5er", "ab", "cdXY"}, true},
		{"url, '#' in the password", "postgres://u5er:ab#cdXY@db.example/app",
			"postgres://db.example/app", []string{"u5er", "cdXY"}, true},
		{"url, '@' in a parameter", "postgres://db.example/app?application_name=a@b",
			"postgres://b", nil, true},
		{"url, password in the query", "postgres://db.example/app?user=u5er&password=Qu3ry-Pw",
			"postgres://db.example/app", []string{"u5er", "Qu3ry-Pw"}, false},
		{"postgresql scheme, any case", "PostgreSQL://u5er:Pw-XYZ@db.example:6543/app",
			"postgres://db.example:6543/app", []string{"u5er", "Pw-XYZ"}, true},
		{"url, user only", "postgres://alic3@db.example/app", "postgres://db.example/app", []string{"alic3"}, false},
		{"url, several hosts", "postgres://u5er:Pw-XYZ@h1:5432,h2:5433/app?target_session_attrs=read-write",
			"postgres://h1:5432,h2:5433/app", []string{"u5er", "Pw-XYZ", "read-write"}, false},
		{"url, IPv6", "postgres://u5er:Pw-XYZ@[::1]:5432/app", "postgres://[::1]:5432/app", []string{"u5er", "Pw-XYZ"}, false},
		{"url, no database", "postgres://u5er:Pw-XYZ@db.example", "postgres://db.example", []string{"u5er", "Pw-XYZ"}, false},
		{"url, server in the query", "postgres://u5er:Pw-XYZ@127.0.0.1:5432/kgdb?host=db2.example&port=6432&sslmode=disable",
			"postgres://127.0.0.1:5432/kgdb host=db2.example port=6432", []string{"u5er", "Pw-XYZ"}, false},
		{"url, unix socket", "postgres://u5er:Pw-XYZ@/app?host=/run/postgresql", "postgres:///app host=/run/postgresql", []string{"u5er", "Pw-XYZ"}, false},
		{"url, control character", "postgres://u5er:Pw-XYZ@db\x01/app", unparsable, []string{"u5er", "Pw-XYZ"}, false},
		{"key/value", "host=db.example user=u5er password=Pw-XYZ dbname=app sslmode=require",
			"host=db.example dbname=app", []string{"u5er", "Pw-XYZ", "require"}, false},
		{"key/value, quoted", `host=db.example port=5433 user='u5er' password='a b\'Pw-XYZ' dbname='my app'`,
			`host=db.example port=5433 dbname='my app'`, []string{"u5er", "Pw-XYZ"}, false},
		{"key/value, spaces around =", "host = db.example password = Pw-XYZ dbname = app", "host=db.example dbname=app", []string{"Pw-XYZ"}, false},
		{"key/value, '@' in the password", "host=127.0.0.1 user=keygate password=Pg-S3cr3t@Zq9xW dbname=keygate",
			"host=127.0.0.1 dbname=keygate", []string{"Pg-S3cr3t", "Zq9xW"}, false},
		{"key/value, unterminated quote", "host=db.example password='Pw-XYZ", unparsable, []string{"Pw-XYZ", "db.example"}, true},
		{"key/value, no host", "user=u5er password=Pw-XYZ", "postgres (the default server and database)", []string{"u5er", "Pw-XYZ"}, false},
		{"empty", "", unparsable, nil, false},
		{"another scheme", "mysql://u5er:Pw-XYZ@db.example/app", unparsable, []string{"u5er", "Pw-XYZ"}, true},
		{"words", "not a dsn Pw-XYZ", unparsable, []string{"Pw-XYZ"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Redact(tc.dsn)
			if got != tc.want {
				t.Errorf("Redact = %q, want %q", got, tc.want)
			}
			for _, s := range tc.secrets {
				if strings.Contains(got, s) {
					t.Errorf("Redact shows %q: %q", s, got)
				}
			}
			if tc.dsn == "" {
				return
			}
			_, err := CheckDSN(tc.dsn)
			if (err != nil) != tc.checkErr {
				t.Errorf("CheckDSN = %v, want an error: %v", err, tc.checkErr)
			}
			if err != nil {
				for _, s := range append(tc.secrets, tc.dsn) {
					if strings.Contains(err.Error(), s) {
						t.Errorf("CheckDSN's error shows %q: %v", s, err)
					}
				}
			}
		})
	}
}

// TestScrub: a message that quotes the password, whole, percent-decoded or
// as pgx misread it, or the DSN itself, shows none of them.
func TestScrub(t *testing.T) {
	for _, tc := range []struct{ dsn, msg, secret string }{
		{"postgres://keygate:Pg-S3cr3t@Zq9xW@127.0.0.1/keygate", "lookup Zq9xW@127.0.0.1: no such host; password Pg-S3cr3t", "Zq9xW"},
		{"postgres://keygate:Pg-S3cr3t%40Zq9xW@127.0.0.1/keygate", "auth failed for Pg-S3cr3t@Zq9xW", "Zq9xW"},
		{"postgres://keygate:Pg-S3cr3t%40Zq9xW@127.0.0.1/keygate", "the dsn postgres://keygate:Pg-S3cr3t%40Zq9xW@127.0.0.1/keygate", "Pg-S3cr3t"},
		{"host=h password='a Pw-XYZ' dbname=d", "password a Pw-XYZ", "Pw-XYZ"},
		{"postgres://kgu5er:pw@h/d", `failed SASL auth: FATAL: password authentication failed for user "kgu5er" (SQLSTATE 28P01)`, "kgu5er"},
		{"host=h user=kgu5er dbname=d", "failed to connect to `user=kgu5er database=d`", "kgu5er"},
	} {
		got := Scrub(tc.msg, tc.dsn)
		if strings.Contains(got, tc.secret) || strings.Contains(got, "Pg-S3cr3t") {
			t.Errorf("Scrub(%q) = %q", tc.msg, got)
		}
	}
	// A user name that is a word is cut where it is the user, not as the
	// word: the message stays readable.
	dsn := "postgres://postgres@127.0.0.1/keygate"
	msg := `postgres storage: connecting to postgres@127.0.0.1 for user "postgres": timeout`
	if got, want := Scrub(msg, dsn), `postgres storage: connecting to xxxxx@127.0.0.1 for user "xxxxx": timeout`; got != want {
		t.Errorf("Scrub(%q) = %q, want %q", msg, got, want)
	}
}
