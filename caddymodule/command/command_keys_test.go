package command_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/keystore"
)

// TestKeysCommandLineUnits: the CLI takes durations in days as well as
// Go's units (--grace 1d, --rate-limit day=1/1d), and --from and --to of
// keys usage a date alone, --to including the whole of its day.
func TestKeysCommandLineUnits(t *testing.T) {
	cliGateway(t, t.TempDir(), "ok")

	create := func(t *testing.T, flags ...string) (keystore.Key, error) {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"keys", "create", "--service", "contracts", "--name", "units", "--owner", "alice",
			"--privileges", "get", "--json"}, flags...)...)
		var k keystore.Key
		if err == nil {
			err = json.Unmarshal([]byte(out), &k)
		}
		return k, err
	}

	t.Run("rate-limit windows", func(t *testing.T) {
		tests := []struct {
			flag    string
			seconds int64  // the window the key shows
			shown   string // as keys show prints it
			refused string // or a part of the error
		}{
			{flag: "day=1000/1d", seconds: 86400, shown: "day=1000/1d"},
			{flag: "minute=600/1m", seconds: 60, shown: "minute=600/1m"},
			{flag: "burst=20/1s", seconds: 1, shown: "burst=20/1s"},
			{flag: "long=10/1h30m", seconds: 5400, shown: "long=10/90m"},
			{flag: "x=1/2d", refused: "windowSeconds must be a whole number from 1 to 86400"},
			{flag: "x=1/1.5s", refused: `the window "1.5s" is not a duration of whole seconds (1s, 1m, 1h, 1d)`},
			{flag: "x=1/day", refused: `the window "day" is not a duration of whole seconds`},
		}
		for _, tt := range tests {
			t.Run(tt.flag, func(t *testing.T) {
				k, err := create(t, "--rate-limit", tt.flag)
				if tt.refused != "" {
					if err == nil || !strings.Contains(err.Error(), tt.refused) {
						t.Fatalf("--rate-limit %s: %v, want an error with %q", tt.flag, err, tt.refused)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if len(k.RateLimits) != 1 || k.RateLimits[0].WindowSeconds != tt.seconds {
					t.Errorf("--rate-limit %s: the key's limits are %+v, want a window of %d s", tt.flag, k.RateLimits, tt.seconds)
				}
				if out, _, err := runCLI(t, "keys", "show", k.ID); err != nil || !strings.Contains(out, tt.shown) {
					t.Errorf("keys show: %v\n%s\nwant %q", err, out, tt.shown)
				}
			})
		}
	})

	t.Run("roll grace", func(t *testing.T) {
		k, err := create(t)
		if err != nil {
			t.Fatal(err)
		}
		tests := []struct {
			args    []string
			grace   time.Duration // until the previous token's expiry
			refused string
		}{
			{args: nil, grace: 24 * time.Hour},
			{args: []string{"--grace", "1d"}, grace: 24 * time.Hour},
			{args: []string{"--grace", "30d"}, grace: 30 * 24 * time.Hour},
			{args: []string{"--grace", "1d12h"}, grace: 36 * time.Hour},
			{args: []string{"--grace", "90m"}, grace: 90 * time.Minute},
			{args: []string{"--grace", "45d"}, refused: "--grace 45d: from 0 to 30d"},
			{args: []string{"--grace", "-1s"}, refused: "--grace -1s: from 0 to 30d"},
			{args: []string{"--grace", "1500ms"}, refused: "whole seconds"},
			{args: []string{"--grace", "tomorrow"}, refused: `--grace "tomorrow"`},
		}
		for _, tt := range tests {
			t.Run(strings.Join(append([]string{"grace"}, tt.args...), " "), func(t *testing.T) {
				before := time.Now()
				out, _, err := runCLI(t, append([]string{"keys", "roll", k.ID, "--json"}, tt.args...)...)
				if tt.refused != "" {
					if err == nil || !strings.Contains(err.Error(), tt.refused) {
						t.Fatalf("roll %v: %v, want an error with %q", tt.args, err, tt.refused)
					}
					return
				}
				var rolled keystore.Key
				if err == nil {
					err = json.Unmarshal([]byte(out), &rolled)
				}
				if err != nil {
					t.Fatal(err)
				}
				if rolled.PreviousTokenExpiry == nil {
					t.Fatalf("roll %v: no previousTokenExpiry: %s", tt.args, out)
				}
				if d := rolled.PreviousTokenExpiry.Sub(before); d < tt.grace-time.Second || d > tt.grace+time.Minute {
					t.Errorf("roll %v: the previous token works %s, want %s", tt.args, d, tt.grace)
				}
			})
		}
	})

	t.Run("usage dates", func(t *testing.T) {
		k, err := create(t)
		if err != nil {
			t.Fatal(err)
		}
		// One use today, for the series to show where it falls.
		useKey(t, k.Token)

		today := time.Now().UTC().Truncate(24 * time.Hour)
		day := func(n int) string { return today.AddDate(0, 0, n).Format(time.DateOnly) }
		start := func(n int) string { return today.AddDate(0, 0, n).Format(time.RFC3339) }
		tests := []struct {
			name    string
			args    []string
			starts  []string // the START column, in order
			okToday bool     // today's use is in the table
			refused string
		}{
			{name: "days through today", args: []string{"--resolution", "day", "--from", day(-2), "--to", day(0)},
				starts: []string{start(-2), start(-1), start(0)}, okToday: true},
			{name: "one day", args: []string{"--resolution", "day", "--from", day(-1), "--to", day(-1)},
				starts: []string{start(-1)}},
			{name: "a day by the hour", args: []string{"--from", day(0), "--to", day(0)}, okToday: true,
				starts: func() (s []string) {
					for h := range 24 {
						s = append(s, today.Add(time.Duration(h)*time.Hour).Format(time.RFC3339))
					}
					return s
				}()},
			{name: "RFC 3339 times as before", args: []string{"--resolution", "day", "--from", start(-3), "--to", start(-1)},
				starts: []string{start(-3), start(-2)}},
			{name: "from the oldest day kept, as a date", args: []string{"--resolution", "day", "--from", day(-90), "--to", day(-89)},
				starts: []string{start(-90), start(-89)}},
			{name: "to alone, its 30 days reaching past those kept", args: []string{"--resolution", "day", "--to", day(-85)},
				starts: []string{start(-90), start(-89), start(-88), start(-87), start(-86), start(-85)}},
			{name: "to alone, before the days kept", args: []string{"--resolution", "day", "--to", day(-95)},
				refused: "to: to must be within the last 90 days"},
			// Tomorrow is today somewhere east of UTC: its whole day ends
			// within 48 hours, and is accepted.
			{name: "to tomorrow, a date east of UTC", args: []string{"--resolution", "day", "--from", day(-1), "--to", day(1)},
				starts: []string{start(-1), start(0), start(1)}, okToday: true},
			{name: "to the day after tomorrow", args: []string{"--resolution", "day", "--to", day(2)},
				refused: "to: to must be at most 48 hours from now"},
			{name: "a date that does not exist", args: []string{"--from", "2026-02-30"}, refused: `--from "2026-02-30"`},
			{name: "an empty from", args: []string{"--from", ""}, refused: "--from is empty"},
			{name: "an empty resolution", args: []string{"--resolution", ""}, refused: "--resolution is empty"},
			{name: "a word", args: []string{"--to", "yesterday"}, refused: `--to "yesterday": want a date (2026-11-27) or an RFC 3339 time`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				out, _, err := runCLI(t, append([]string{"keys", "usage", k.ID}, tt.args...)...)
				if tt.refused != "" {
					if err == nil || !strings.Contains(err.Error(), tt.refused) {
						t.Fatalf("usage %v: %v, want an error with %q", tt.args, err, tt.refused)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var starts []string
				for _, m := range regexp.MustCompile(`(?m)^(\S+Z)\s`).FindAllStringSubmatch(out, -1) {
					starts = append(starts, m[1])
				}
				if strings.Join(starts, " ") != strings.Join(tt.starts, " ") {
					t.Errorf("usage %v lists\n%s\nwant the rows %v", tt.args, out, tt.starts)
				}
				if total := regexp.MustCompile(`(?m)^total\s+1\s`).MatchString(out); total != tt.okToday {
					t.Errorf("usage %v: today's use counted %v, want %v:\n%s", tt.args, total, tt.okToday, out)
				}
			})
		}
	})
}

// useKey makes one request with token through cliGateway's site, which
// must let it through; the reply is the test site's, not the API's, so
// this client's own transport keeps it from the OpenAPI check.
func useKey(t *testing.T, token string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d/webapi/contracts/x", sitePort), nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the key's use: %d", resp.StatusCode)
	}
}
