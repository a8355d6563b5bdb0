package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testclock"
)

func TestCheckURL(t *testing.T) {
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"https://example.com/hooks", true},
		{"https://example.com:8443/hooks?x=1", true},
		{"http://localhost:9000/h", true},
		{"http://LOCALHOST/h", true},
		{"http://127.0.0.1/h", true},
		{"http://127.200.3.4:81/h", true},
		{"http://[::1]:8080/h", true},
		{"http://example.com/h", false},
		{"http://10.0.0.1/h", false},
		{"http://[::2]/h", false},
		{"http://localhost.example.com/h", false},
		{"ftp://example.com/h", false},
		{"https://user:pw@example.com/h", false},
		{"https://example.com/h#frag", false},
		{"/relative", false},
		{"https://", false},
		{"https://exa mple.com/", false},
		{"https://example.com:99999/", false},
		{"https://example.com/" + strings.Repeat("a", 2048), false},
		{"https://example.com/\x01", false},
		// IPv4 in the notations of inet_aton(3): whatever a resolver makes
		// of them, they are refused.
		{"https://2130706433:2019/stop", false},
		{"https://0x7f.1:2019/", false},
		{"https://0x7f000001/", false},
		{"https://0177.0.0.1/", false},
		{"https://017700000001/", false},
		{"https://127.1/", false},
		{"https://0:2019/", false},
		{"https://10.1/", false},
		{"https://2852039166/", false},
		{"https://0251.0376.0251.0376/", false},
		{"https://0xa9.0xfe.0xa9.0xfe./", false},
		{"https://1e100.net/", true},
		{"https://cafe.example/", true},
		{"https://08.example/", true},
		{"https://123.example/", true},
		{"", false},
	} {
		if err := CheckURL(c.url); (err == nil) != c.ok {
			t.Errorf("CheckURL(%q) = %v, want ok %v", c.url, err, c.ok)
		}
	}
}

// TestLoopbackDial: a plain-http delivery connects to a loopback address
// only, whatever its name resolved to.
func TestLegacyIPv4(t *testing.T) {
	for host, want := range map[string]string{
		"2130706433": "127.0.0.1", "0x7f.1": "127.0.0.1", "0177.0.0.1": "127.0.0.1", "127.1": "127.0.0.1",
		"10.1": "10.0.0.1", "0xa9.0xfe.0xa9.0xfe": "169.254.169.254", "0": "0.0.0.0", "1.2.3": "1.2.0.3",
		"127.0.0.1": "", "256.1": "", "1.2.3.4.5": "", "08": "", "cafe": "", "1.2.3.256": "", "4294967296": "", "example.com": "",
	} {
		ip, ok := legacyIPv4(host)
		if got := ""; ok {
			got = ip.String()
			if got != want {
				t.Errorf("legacyIPv4(%q) = %s, want %q", host, got, want)
			}
		} else if want != "" {
			t.Errorf("legacyIPv4(%q) refused, want %s", host, want)
		}
	}
}

func TestLoopbackDial(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:80": true, "127.9.9.9:1": true, "[::1]:443": true, "[::ffff:127.0.0.1]:80": true,
		"192.0.2.1:80": false, "[2001:db8::1]:80": false, "10.1.2.3:8080": false, "0.0.0.0:80": false,
	} {
		if err := loopbackDial("tcp", addr); (err == nil) != ok {
			t.Errorf("loopbackDial(%s) = %v, want ok %v", addr, err, ok)
		}
	}
}

func fieldsOf(t *testing.T, err error) string {
	t.Helper()
	var d *problem.Details
	if !errors.As(err, &d) || d.Status != http.StatusBadRequest {
		t.Fatalf("want a 400 problem, got %v", err)
	}
	var fs []string
	for _, e := range d.Errors {
		if e.Message == "" || e.Code == "" {
			t.Errorf("field error without code or message: %+v", e)
		}
		fs = append(fs, e.Field)
	}
	sort.Strings(fs)
	return strings.Join(fs, ",")
}

func TestInputRules(t *testing.T) {
	some := patch.Some[string]
	list := patch.Some[[]string]
	null := func() patch.Field[string] { return patch.Field[string]{Set: true, Null: true} }
	for _, c := range []struct {
		name   string
		in     Input
		create bool
		fields string
	}{
		{"create needs url and events", Input{}, true, "events,url"},
		{"every rule at once", Input{URL: some("http://example.com/"), Events: list([]string{"contract.signed", "nope", "contract.signed"}),
			Owners: list([]string{"alice", "", "bob\n", "alice"}), Description: some(strings.Repeat("é", 4001))}, true,
			"description,events[1],events[2],owners[1],owners[2],owners[3],url"},
		{"empty events", Input{URL: some("https://x.example/"), Events: list([]string{})}, true, "events"},
		{"webhook.test is no subscribable event", Input{URL: some("https://x.example/"), Events: list([]string{"webhook.test"})}, true, "events[0]"},
		{"too many owners", Input{URL: some("https://x.example/"), Events: list([]string{"share.viewed"}), Owners: list(make([]string, 1001))}, true, "owners"},
		{"update cannot remove url or events", Input{URL: null(), Events: patch.Field[[]string]{Set: true, Null: true},
			Enabled: patch.Field[bool]{Set: true, Null: true}}, false, "enabled,events,url"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			if c.create {
				_, err = applyCreate(&c.in, &Targets{})
			} else {
				_, err = applyUpdate(Subscription{URL: "https://a.example/", Events: []string{"share.viewed"}, Owners: []string{}}, &c.in, &Targets{})
			}
			if got := fieldsOf(t, err); got != c.fields {
				t.Errorf("fields %s, want %s", got, c.fields)
			}
		})
	}
}

func TestStore(t *testing.T) { storetest.Run(t, testStore) }

func testStore(t *testing.T, db storage.DB) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC))
	s := newStore(t, db, clock.Now)

	in := &Input{URL: patch.Some("https://hooks.example.com/keygate?tenant=7"),
		Events: patch.Some([]string{"contract.signed", "share.viewed"}), Owners: patch.Some([]string{"alice"}),
		Description: patch.Some("CRM")}
	created, err := s.Create(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	key, err := secretKey(created.Secret)
	if !strings.HasPrefix(created.Secret, "whsec_") || err != nil || len(key) != 32 {
		t.Fatalf("secret %q: %d bytes, %v", created.Secret, len(key), err)
	}
	if created.ID == "" || created.URL != "https://hooks.example.com/keygate?tenant=7" || !created.Enabled ||
		!slices.Equal(created.Events, []string{"contract.signed", "share.viewed"}) || !slices.Equal(created.Owners, []string{"alice"}) ||
		created.Description != "CRM" || !created.CreationTime.Equal(clock.Now()) || created.PreviousSecretExpiry != nil {
		t.Fatalf("created %+v", created)
	}

	t.Run("the secret is stored sealed only", func(t *testing.T) {
		raw := dump(t, db)
		for _, form := range []string{created.Secret, strings.TrimPrefix(created.Secret, "whsec_"), string(key), hex.EncodeToString(key)} {
			if bytes.Contains(raw, []byte(form)) {
				t.Errorf("the database holds the secret in clear (%.12s...)", form)
			}
		}
	})

	t.Run("get and list show no secret", func(t *testing.T) {
		got, err := s.Get(ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx)
		if err != nil || len(list) != 1 {
			t.Fatalf("list %v %v", list, err)
		}
		want := created
		want.Secret = ""
		for _, v := range []Subscription{got, list[0]} {
			a, _ := json.Marshal(v)
			b, _ := json.Marshal(want)
			if string(a) != string(b) || strings.Contains(string(a), "secret\"") {
				t.Errorf("got %s, want %s", a, b)
			}
		}
		if _, err := s.Get(ctx, "no-such-id"); !problem.IsNotFound(err) {
			t.Errorf("unknown id: %v", err)
		}
	})

	t.Run("update changes the fields given, refuses bad ones and changes nothing then", func(t *testing.T) {
		clock.Advance(time.Minute)
		before := storetest.Digest(t, db)
		if _, err := s.Update(ctx, created.ID, &Input{URL: patch.Some("http://example.com/"), Description: patch.Some("x")}); err == nil {
			t.Fatal("bad url accepted")
		}
		if storetest.Digest(t, db) != before {
			t.Error("a refused update changed the database")
		}
		got, err := s.Update(ctx, created.ID, &Input{Events: patch.Some([]string{"contract.created"}),
			Owners: patch.Field[[]string]{Set: true, Null: true}, Enabled: patch.Some(false)})
		if err != nil {
			t.Fatal(err)
		}
		if got.URL != created.URL || !slices.Equal(got.Events, []string{"contract.created"}) || len(got.Owners) != 0 ||
			got.Owners == nil || got.Description != "CRM" || got.Enabled || !got.LastModificationTime.Equal(clock.Now()) ||
			!got.CreationTime.Equal(created.CreationTime) || got.Secret != "" {
			t.Errorf("updated %+v", got)
		}
		if _, err := s.Update(ctx, "no-such-id", &Input{Enabled: patch.Some(true)}); !problem.IsNotFound(err) {
			t.Errorf("unknown id: %v", err)
		}
		if _, err := s.Update(ctx, created.ID, &Input{Enabled: patch.Some(true)}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("rotation: a new secret, the old one signing 24 h more", func(t *testing.T) {
		rotated, err := s.RotateSecret(ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rotated.Secret == created.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.PreviousSecretExpiry == nil ||
			!rotated.PreviousSecretExpiry.Equal(clock.Now().Add(24*time.Hour)) {
			t.Fatalf("rotated %+v", rotated)
		}
		var r *Record
		_ = db.View(ctx, func(tx storage.Tx) (err error) { r, err = s.backend.GetSubscription(tx, created.ID); return err })
		cur, prev, err := s.secrets(r, clock.Now())
		if err != nil || cur != rotated.Secret || prev != created.Secret {
			t.Errorf("secrets now: %v, current ok %v, previous ok %v", err, cur == rotated.Secret, prev == created.Secret)
		}
		if _, prev, _ := s.secrets(r, clock.Now().Add(24*time.Hour)); prev != "" {
			t.Error("the previous secret signs past its 24 h")
		}
		clock.Advance(25 * time.Hour)
		if got, _ := s.Get(ctx, created.ID); got.PreviousSecretExpiry != nil {
			t.Errorf("previous expiry shown after it passed: %v", got.PreviousSecretExpiry)
		}
		if _, err := s.RotateSecret(ctx, "no-such-id"); !problem.IsNotFound(err) {
			t.Errorf("unknown id: %v", err)
		}
	})

	t.Run("a secret sealed under another master key does not open", func(t *testing.T) {
		var r *Record
		_ = db.View(ctx, func(tx storage.Tx) (err error) { r, err = s.backend.GetSubscription(tx, created.ID); return err })
		moved := *r
		moved.ID = "another-id" // bound to its id: a copy into another record does not open either
		if _, _, err := s.secrets(&moved, clock.Now()); !errors.Is(err, errUnsealable) {
			t.Errorf("moved secret: %v", err)
		}
	})

	t.Run("test queues one delivery for that subscription, unless disabled", func(t *testing.T) {
		id, err := s.Test(ctx, created.ID)
		if err != nil || !strings.HasPrefix(id, "msg_") || len(id) != 30 {
			t.Fatalf("test: %q %v", id, err)
		}
		if n, _ := pending(t, s); n != 1 {
			t.Errorf("%d deliveries pending", n)
		}
		if _, err := s.Test(ctx, "no-such-id"); !problem.IsNotFound(err) {
			t.Errorf("unknown id: %v", err)
		}
		if _, err := s.Update(ctx, created.ID, &Input{Enabled: patch.Some(false)}); err != nil {
			t.Fatal(err)
		}
		if n, _ := pending(t, s); n != 0 {
			t.Errorf("disabling left %d deliveries pending", n)
		}
		if _, err := s.Test(ctx, created.ID); !errors.Is(err, ErrDisabled) {
			t.Errorf("test of a disabled subscription: %v", err)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if err := s.Delete(ctx, created.ID); err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, created.ID); !problem.IsNotFound(err) {
			t.Errorf("second delete: %v", err)
		}
		if _, err := s.Deliveries(ctx, created.ID, 10, 0); !problem.IsNotFound(err) {
			t.Errorf("deliveries of a deleted subscription: %v", err)
		}
		if list, _ := s.List(ctx); len(list) != 0 {
			t.Errorf("list after delete: %v", list)
		}
	})

	t.Run("Emit refuses unknown types and data that is no JSON", func(t *testing.T) {
		for _, e := range []struct{ typ, data string }{{"contract.made", "{}"}, {"webhook.test", "{}"}, {"share.viewed", "{nope"}} {
			err := db.Update(ctx, func(tx storage.Tx) error {
				return s.Emit(tx, eventOf(e.typ, e.data))
			})
			if err == nil {
				t.Errorf("Emit(%s, %s) accepted", e.typ, e.data)
			}
		}
	})
}

// dump is every byte the database holds.
func dump(t *testing.T, db storage.DB) []byte {
	t.Helper()
	var out bytes.Buffer
	ctx := context.Background()
	err := db.View(ctx, func(tx storage.Tx) error {
		if db.Backend() == "postgres" {
			rows, err := pgOf(tx).Query(ctx, `SELECT coalesce(string_agg(r::text, E'\n'), '') FROM (
				SELECT s::text AS r FROM webhook_subscriptions s) x`)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					return err
				}
				out.WriteString(s)
			}
			return rows.Err()
		}
		b, err := openBuckets(tx)
		if err != nil {
			return err
		}
		return b.sub.ForEach(func(k, v []byte) error {
			out.Write(k)
			out.Write(v)
			// JSON keeps []byte as base64: decode what is base64 too.
			var m map[string]any
			if json.Unmarshal(v, &m) == nil {
				for _, f := range []string{"sealedSecret", "sealedPrevious"} {
					if s, ok := m[f].(string); ok {
						raw, _ := base64.StdEncoding.DecodeString(s)
						out.Write(raw)
					}
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
