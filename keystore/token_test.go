package keystore

import (
	"context"

	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
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

// TestTokenChecksumBeforeLookup: a token whose checksum fails is refused
// invalid_key without a lookup; a key issued with the earlier format
// still works.
func TestTokenChecksumBeforeLookup(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{`+validContracts+`}`)
		table := &contracts.Operations
		lookups := 0
		lookup := func(h token.Hash) *Entry { lookups++; return e.keys.Lookup(h) }
		req := func(token string) Decision {
			return Authorize(&Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + token},
				ClientIP: netip.MustParseAddr("192.0.2.1"), Method: http.MethodGet, Path: "/webapi/contracts/00000000-0000-4000-8000-000000000000", Now: time.Now()}, table, lookup)
		}
		if d := req(k.Token); !d.Authorized() || lookups != 1 {
			t.Fatalf("the key's token: %+v after %d lookups", d, lookups)
		}
		other := byte('a') // one character changed, whatever it was
		if k.Token[10] == 'a' {
			other = 'b'
		}
		typo := k.Token[:10] + string(other) + k.Token[11:]
		if d := req(typo); d.Status != http.StatusUnauthorized || d.Reason != problem.CodeInvalidKey || lookups != 1 {
			t.Fatalf("a typo: %+v after %d lookups, want 401 invalid_key without a lookup", d, lookups)
		}

		// A key stored by an earlier version, with a token of the earlier format.
		legacy := token.Prefix + token.Random()
		h := token.HashOf(legacy)
		old := mustCreate(t, e.keys, `{`+validContracts+`}`)
		rec := &Record{Key: old, TokenHash: h[:], SealedToken: e.sealer.Seal([]byte(legacy), []byte(old.ID))}
		rec.Token, rec.TokenPrefix = "", legacy[:12]
		rec.LastModificationTime = rec.LastModificationTime.Add(time.Millisecond) // seen as changed
		if err := e.backend.Put(context.Background(), rec, old.LastModificationTime, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := e.keys.Resync(); err != nil {
			t.Fatal(err)
		}
		if d := req(legacy); !d.Authorized() || d.Key().ID != old.ID {
			t.Fatalf("the earlier format's token: %+v", d)
		}
		if got, err := e.keys.Reveal(old.ID); err != nil || got != legacy {
			t.Errorf("Reveal = %q, %v", got, err)
		}
	})
}

// TestDisabledStored: a disabled key stays disabled once read back from
// storage, and a record written before keys could be disabled (no
// "disabled" field) loads enabled, whatever "enabled" says.
func TestDisabledStored(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{`+validContracts+`,"enabled":false}`)
		on := mustCreate(t, e.keys, `{`+validContracts+`}`)
		reopened := e.reopen(t)
		if g, err := reopened.Get(k.ID); err != nil || g.Enabled {
			t.Errorf("disabled key read back: %+v %v", g, err)
		}
		if g, err := reopened.Get(on.ID); err != nil || !g.Enabled {
			t.Errorf("enabled key read back: %+v %v", g, err)
		}
		if _, err := e.keys.Update(k.ID, mustInput(t, `{"enabled":null}`)); err == nil {
			t.Error("enabled null accepted")
		}
	})
	for raw, want := range map[string]bool{
		`{"id":"a","service":"contracts"}`:                  true,
		`{"id":"a","service":"contracts","enabled":false}`:  true,
		`{"id":"a","service":"contracts","disabled":true}`:  false,
		`{"id":"a","enabled":true,"disabled":true}`:         false,
		`{"id":"a","service":"contracts","disabled":false}`: true,
	} {
		var r Record
		if err := json.Unmarshal([]byte(raw), &r); err != nil || r.Enabled != want {
			t.Errorf("%s: enabled %v, %v; want %v", raw, r.Enabled, err, want)
		}
		// The backends' own decoder reads it the same.
		if d, err := decodeRecord([]byte(raw)); err != nil || d.Enabled != want {
			t.Errorf("%s: decodeRecord: %+v, %v; want enabled %v", raw, d, err, want)
		}
	}
	for _, enabled := range []bool{false, true} {
		rec := Record{Key: Key{ID: "a", Enabled: enabled}}
		b, _ := json.Marshal(rec)
		if strings.Contains(string(b), `"disabled":true`) == enabled {
			t.Errorf("a key enabled %v is stored as %s", enabled, b)
		}
		// The backends' own encoder writes the same bytes.
		if v, err := encodeRecordValue(&rec); err != nil || string(v) != string(b) {
			t.Errorf("encodeRecordValue: %s, %v; want %s", v, err, b)
		}
	}
}

// sinkRecorder is an events.Sink that keeps what it is given, and fails
// when told to (the change must then not be stored either).
type sinkRecorder struct {
	got  []events.Event
	fail error
}

func (r *sinkRecorder) Emit(tx storage.Tx, e events.Event) error {
	if r.fail != nil {
		return r.fail
	}
	r.got = append(r.got, e)
	return nil
}

// TestKeyDisabledEvent: disabling a key emits key.disabled, once, in the
// transaction of the change, with the key's id, name, owner, service and
// time and no token; other changes emit nothing; an emit that fails fails
// the change.
func TestKeyDisabledEvent(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		sink := &sinkRecorder{}
		e.keys.EmitTo(sink)
		k := mustCreate(t, e.keys, `{"service":"share","name":"ci","owner":"alice","privileges":["get"]}`)
		for _, body := range []string{`{"name":"ci-2"}`, `{"enabled":true}`, `{"enabled":false}`, `{"enabled":false}`, `{"enabled":true}`} {
			if _, err := e.keys.Update(k.ID, mustInput(t, body)); err != nil {
				t.Fatal(err)
			}
		}
		if len(sink.got) != 1 {
			t.Fatalf("%d events: %+v", len(sink.got), sink.got)
		}
		ev := sink.got[0]
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatal(err)
		}
		if ev.Type != events.KeyDisabled || ev.Owner != "alice" || data["id"] != k.ID || data["name"] != "ci-2" ||
			data["owner"] != "alice" || data["service"] != "share" || data["time"] == nil || len(data) != 5 ||
			strings.Contains(string(ev.Data), k.Token) {
			t.Errorf("event %+v, data %s", ev, ev.Data)
		}

		sink.fail = errors.New("the outbox is full")
		if _, err := e.keys.Update(k.ID, mustInput(t, `{"enabled":false}`)); err == nil {
			t.Fatal("a disable whose event failed was stored")
		}
		if g, _ := e.reopen(t).Get(k.ID); !g.Enabled {
			t.Error("the failed disable is stored")
		}
		if g, _ := e.keys.Get(k.ID); !g.Enabled {
			t.Error("the failed disable is in memory")
		}
	})
}
