package keystore

import (
	"context"

	"encoding/base64"
	"encoding/json"
	"errors"
	"hash/crc32"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/events"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
)

// TestTokenFormat: a new token is kg_, 43 base62 characters, '_' and their
// base62 CRC32; every typo (one character changed, two swapped, one left
// out or added) fails the checksum, and tokens of the earlier format
// (kg_ and 43 base64url characters) are still well formed.
func TestTokenFormat(t *testing.T) {
	re := regexp.MustCompile(`^` + TokenPattern + `$`)
	for range 200 {
		tok := NewToken()
		if !re.MatchString(tok) || len(tok) != tokenLen || !wellFormedToken(tok) {
			t.Fatalf("NewToken = %q", tok)
		}
		if got := tokenChecksum(tok[3:46]); got != tok[47:] || crc32.ChecksumIEEE([]byte(tok[3:46])) != decode62(tok[47:]) {
			t.Fatalf("checksum of %q = %s", tok, got)
		}
		for i := len(TokenPrefix); i < len(tok); i++ {
			if tok[i] == '_' {
				continue
			}
			for _, c := range []byte{'0', 'z', 'Q', '-', '_', '+'} {
				if c == tok[i] {
					continue
				}
				typo := tok[:i] + string(c) + tok[i+1:]
				if wellFormedToken(typo) {
					t.Fatalf("%q (from %q) is well formed", typo, tok)
				}
			}
			if i+1 < len(tok) && tok[i] != tok[i+1] && tok[i+1] != '_' {
				swapped := tok[:i] + string(tok[i+1]) + string(tok[i]) + tok[i+2:]
				if wellFormedToken(swapped) {
					t.Fatalf("%q (swapped from %q) is well formed", swapped, tok)
				}
			}
		}
		for _, bad := range []string{tok[:len(tok)-1], tok + "0", "kg-" + tok[3:], strings.ToUpper(tok[:3]) + tok[3:]} {
			if wellFormedToken(bad) {
				t.Fatalf("%q is well formed", bad)
			}
		}
	}
	if wellFormedToken(TokenPrefix + strings.Repeat("!", 43)) {
		t.Error("a token of the earlier length with other characters is well formed")
	}
	legacy := TokenPrefix + base64.RawURLEncoding.EncodeToString(make([]byte, 32))
	if !wellFormedToken(legacy) || !wellFormedToken(TokenPrefix+RandomString()) {
		t.Errorf("a token of the earlier format is refused: %q", legacy)
	}
	if n := testing.AllocsPerRun(100, func() { wellFormedToken("kg_SWdFeyUrLC4w16QTOVtCdZzoBdYxqs0wIKEjYNxmncf_0sWiqL") }); n != 0 {
		t.Errorf("wellFormedToken allocates %v times", n)
	}
}

// TestCRC32: the key check's CRC32 is the standard library's, for every
// length around its 8-byte steps.
func TestCRC32(t *testing.T) {
	s := "kg_SWdFeyUrLC4w16QTOVtCdZzoBdYxqs0wIKEjYNxmncf_0sWiqL\x00\xff"
	for n := 0; n <= len(s); n++ {
		if got, want := crc32IEEE(s[:n]), crc32.ChecksumIEEE([]byte(s[:n])); got != want {
			t.Errorf("crc32IEEE(%q) = %08x, want %08x", s[:n], got, want)
		}
	}
}

// decode62 reads base62 digits (the test's own decoder, to check the
// checksum against the standard library's CRC32).
func decode62(s string) uint32 {
	var n uint64
	for i := 0; i < len(s); i++ {
		n = n*62 + uint64(strings.IndexByte(base62Digits, s[i]))
	}
	return uint32(n)
}

// TestTokenChecksumBeforeLookup: a token whose checksum fails is refused
// invalid_key without a lookup; a key issued with the earlier format
// still works.
func TestTokenChecksumBeforeLookup(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{`+validContracts+`}`)
		table := &testContractsTable
		lookups := 0
		lookup := func(h TokenHash) *Entry { lookups++; return e.keys.Lookup(h) }
		req := func(token string) Decision {
			return Authorize(&Request{Service: ServiceContracts, Authorization: []string{"Bearer " + token},
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
		legacy := TokenPrefix + RandomString()
		h := HashToken(legacy)
		old := mustCreate(t, e.keys, `{`+validContracts+`}`)
		rec := &Record{Key: old, TokenHash: h[:], SealedToken: e.sealer.Seal([]byte(legacy), []byte(old.ID))}
		rec.Token, rec.TokenPrefix = "", legacy[:12]
		rec.LastModificationTime = rec.LastModificationTime.Add(time.Millisecond) // seen as changed
		if err := e.backend.Put(context.Background(), rec, nil); err != nil {
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
	}
	b, _ := json.Marshal(Record{Key: Key{ID: "a", Enabled: false}})
	if !strings.Contains(string(b), `"disabled":true`) {
		t.Errorf("a disabled key is stored as %s", b)
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
