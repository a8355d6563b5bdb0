package keystore

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/token"
	"github.com/keygate/keygate/upstreams/contracts"
)

// TestRoll: a roll gives the key a new token (returned once) and keeps its
// id, privileges and counts; the previous token answers, marked as such,
// until its grace period ends, then 401 invalid_key marked as expired;
// rolling again ends an older one at once; grace 0 ends it at once; each
// roll emits key.rolled; all of it survives a reopen.
func TestRoll(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sink := &sinkRecorder{}
		e.keys.EmitTo(sink)
		k := mustCreate(t, e.keys, `{"service":"contracts","name":"ci","owner":"alice","privileges":["get","search"]}`)
		check := func(keys *Keys, token string) Decision {
			return Authorize(&Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + token},
				ClientIP: netip.MustParseAddr("192.0.2.1"), Method: http.MethodGet, Path: "/webapi/contracts", Now: e.clock.Now()},
				&contracts.Operations, keys.Lookup)
		}
		e.keys.Use(check(e.keys, k.Token).Entry, e.clock.Now())

		r1, err := e.keys.Roll(k.ID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		until := e.clock.Now().Add(time.Hour)
		if r1.ID != k.ID || r1.Token == k.Token || !regexp.MustCompile(`^`+token.Pattern+`$`).MatchString(r1.Token) ||
			r1.TokenPrefix != r1.Token[:12] || r1.UsageCount != 1 || len(r1.Privileges) != 2 ||
			r1.PreviousTokenExpiry == nil || !r1.PreviousTokenExpiry.Equal(until) {
			t.Fatalf("rolled: %+v", r1)
		}
		if got, err := e.keys.Reveal(k.ID); err != nil || got != r1.Token {
			t.Errorf("Reveal = %q, %v", got, err)
		}
		if d := check(e.keys, r1.Token); !d.Authorized() || d.PreviousToken {
			t.Errorf("the new token: %+v", d)
		}
		if d := check(e.keys, k.Token); !d.Authorized() || !d.PreviousToken {
			t.Errorf("the previous token in its grace period: %+v", d)
		}
		// Read back from storage, the same.
		reopened := e.reopen(t)
		if d := check(reopened, k.Token); !d.Authorized() || !d.PreviousToken {
			t.Errorf("the previous token after a reopen: %+v", d)
		}
		if g, _ := reopened.Get(k.ID); g.PreviousTokenExpiry == nil || !g.PreviousTokenExpiry.Equal(until) {
			t.Errorf("after a reopen: %+v", g)
		}

		e.clock.Advance(time.Hour)
		if d := check(e.keys, k.Token); d.Reason != problem.CodeInvalidKey || !d.PreviousTokenExpired || d.Entry != nil {
			t.Errorf("the previous token after its grace period: %+v", d)
		}
		if g, _ := e.keys.Get(k.ID); g.PreviousTokenExpiry != nil {
			t.Errorf("previousTokenExpiry after the grace period: %v", g.PreviousTokenExpiry)
		}

		// Rolling again within a grace period ends the older token at once.
		r2, err := e.keys.Roll(k.ID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		r3, err := e.keys.Roll(k.ID, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if d := check(e.keys, r1.Token); d.Reason != problem.CodeInvalidKey || d.PreviousTokenExpired {
			t.Errorf("the token before the previous: %+v", d)
		}
		if d := check(e.keys, r2.Token); !d.Authorized() || !d.PreviousToken {
			t.Errorf("the previous token: %+v", d)
		}
		// Grace 0: the previous token ends at once.
		r4, err := e.keys.Roll(k.ID, 0)
		if err != nil || r4.PreviousTokenExpiry != nil {
			t.Fatalf("roll without grace: %+v %v", r4, err)
		}
		for _, old := range []string{r2.Token, r3.Token} {
			if d := check(e.keys, old); d.Reason != problem.CodeInvalidKey {
				t.Errorf("an earlier token after a roll without grace: %+v", d)
			}
		}
		// The token it replaced is told that it expired.
		if d := check(e.keys, r3.Token); !d.PreviousTokenExpired {
			t.Errorf("the token a roll without grace replaced: %+v, want it marked expired", d)
		}
		if d := check(e.keys, r4.Token); !d.Authorized() {
			t.Errorf("the newest token: %+v", d)
		}
		// Other changes keep the grace period.
		r5, err := e.keys.Roll(k.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.keys.Update(k.ID, mustInput(t, `{"name":"ci-2"}`)); err != nil {
			t.Fatal(err)
		}
		if d := check(e.keys, r4.Token); !d.Authorized() || !d.PreviousToken {
			t.Errorf("the previous token after an update: %+v", d)
		}
		_ = r5

		for _, bad := range []time.Duration{-time.Second, MaxRollGrace + time.Second} {
			if _, err := e.keys.Roll(k.ID, bad); fieldErrorsOf(err) != "graceSeconds" {
				t.Errorf("grace %s: %v", bad, err)
			}
		}
		if _, err := e.keys.Roll("00000000-0000-4000-8000-000000000000", time.Hour); err != ErrNotFound {
			t.Errorf("an unknown key: %v", err)
		}

		if len(sink.got) != 5 {
			t.Fatalf("%d events, want one per roll (5)", len(sink.got))
		}
		for _, ev := range sink.got {
			var data map[string]any
			if err := json.Unmarshal(ev.Data, &data); err != nil || ev.Type != events.KeyRolled || ev.Owner != "alice" || data["id"] != k.ID {
				t.Errorf("event %+v %s", ev, ev.Data)
			}
		}
	})
}

// fieldErrorsOf is the one field a 400 problem names, or "".
func fieldErrorsOf(err error) string {
	d, ok := err.(*problem.Details)
	if !ok || len(d.Errors) != 1 {
		return ""
	}
	return d.Errors[0].Field
}

// TestWarnExpiring: key.expiring goes out once per key and end of
// validity, for keys ending within the window and not yet ended; a new
// notValidAfter arms it again; a second instance on the same database
// sends nothing more; the mark survives a reopen and other changes.
func TestWarnExpiring(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sink := &sinkRecorder{}
		e.keys.EmitTo(sink)
		now := e.clock.Now()
		at := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
		soon := mustCreate(t, e.keys, `{"service":"contracts","name":"soon","owner":"alice","privileges":["get"],"notValidAfter":"`+at(48*time.Hour)+`"}`)
		mustCreate(t, e.keys, `{"service":"contracts","name":"later","owner":"bob","privileges":["get"],"notValidAfter":"`+at(30*24*time.Hour)+`"}`)
		mustCreate(t, e.keys, `{"service":"contracts","name":"over","owner":"carol","privileges":["get"],"notValidAfter":"`+at(-time.Hour)+`"}`)
		mustCreate(t, e.keys, `{"service":"share","name":"forever","owner":"dave","privileges":["get"]}`)

		week := 7 * 24 * time.Hour
		if n, err := e.keys.WarnExpiring(now, week); err != nil || n != 1 {
			t.Fatalf("WarnExpiring = %d, %v; want 1", n, err)
		}
		if n, err := e.keys.WarnExpiring(now.Add(time.Minute), week); err != nil || n != 0 {
			t.Fatalf("again: %d, %v; want 0", n, err)
		}
		// Another instance on the same database, or a restart: nothing more.
		other := e.reopen(t)
		other.EmitTo(sink)
		if n, err := other.WarnExpiring(now.Add(2*time.Minute), week); err != nil || n != 0 {
			t.Fatalf("a second instance: %d, %v; want 0", n, err)
		}
		// Another change keeps the mark; a new end of validity arms it.
		if _, err := e.keys.Update(soon.ID, mustInput(t, `{"name":"soon-2"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := e.keys.Roll(soon.ID, 0); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.keys.WarnExpiring(now.Add(3*time.Minute), week); n != 0 {
			t.Fatalf("after an update and a roll: %d warnings", n)
		}
		if _, err := e.keys.Update(soon.ID, mustInput(t, `{"notValidAfter":"`+at(72*time.Hour)+`"}`)); err != nil {
			t.Fatal(err)
		}
		if n, err := e.keys.WarnExpiring(now.Add(4*time.Minute), week); err != nil || n != 1 {
			t.Fatalf("after a new notValidAfter: %d, %v; want 1", n, err)
		}

		var expiring []events.Event
		for _, ev := range sink.got {
			if ev.Type == events.KeyExpiring {
				expiring = append(expiring, ev)
			}
		}
		if len(expiring) != 2 {
			t.Fatalf("%d key.expiring events, want 2: %+v", len(expiring), sink.got)
		}
		var data map[string]any
		if err := json.Unmarshal(expiring[1].Data, &data); err != nil || data["id"] != soon.ID || data["name"] != "soon-2" ||
			data["notValidAfter"] != at(72*time.Hour) || expiring[1].Owner != "alice" {
			t.Errorf("event %s (%v)", expiring[1].Data, err)
		}
	})
}
