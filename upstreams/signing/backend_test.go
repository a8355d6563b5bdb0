package signing

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/storage/boltdb"
	"github.com/keygate/keygate/internal/storage/pgdb"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
)

// newBackend is the signing Backend of db's kind.
func newBackend(t testing.TB, db storage.DB) Backend {
	t.Helper()
	return storetest.Pick[Backend](t, db,
		func(d *boltdb.DB) (Backend, error) { return NewBoltBackend(d) },
		func(d *pgdb.DB) Backend { return NewPostgresBackend(d) })
}

// TestBackend is the conformance suite of signing.Backend: what one
// backend stores, reads back and forgets, the other does the same.
func TestBackend(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		b := newBackend(t, db)
		ctx := context.Background()
		a, other := uuid.NewString(), uuid.NewString()
		sent := time.Date(2026, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
		rec := &OTPRecord{Hash: bytes.Repeat([]byte{7}, 32), Salt: bytes.Repeat([]byte{9}, 16), Sent: sent, Expires: sent.Add(otpValidity), Failures: 2}

		update := func(fn func(tx storage.Tx) error) {
			t.Helper()
			if err := db.Update(ctx, fn); err != nil {
				t.Fatal(err)
			}
		}
		otp := func(id string) *OTPRecord {
			t.Helper()
			var got *OTPRecord
			update(func(tx storage.Tx) (err error) { got, err = b.OTP(tx, id); return err })
			return got
		}
		sig := func(id string) (string, []byte, bool) {
			t.Helper()
			var m string
			var d []byte
			var ok bool
			if err := db.View(ctx, func(tx storage.Tx) (err error) { m, d, ok, err = b.Signature(tx, id); return err }); err != nil {
				t.Fatal(err)
			}
			return m, d, ok
		}

		if got := otp(a); got != nil {
			t.Fatalf("password before any: %+v", got)
		}
		update(func(tx storage.Tx) error { return b.PutOTP(tx, a, rec) })
		got := otp(a)
		if got == nil || !bytes.Equal(got.Hash, rec.Hash) || !bytes.Equal(got.Salt, rec.Salt) ||
			!got.Sent.Equal(rec.Sent) || !got.Expires.Equal(rec.Expires) || got.Failures != 2 || got.Sent.Location() != time.UTC {
			t.Fatalf("password read back as %+v, stored %+v", got, rec)
		}
		rec.Failures = 3
		update(func(tx storage.Tx) error { return b.PutOTP(tx, a, rec) })
		if got := otp(a); got.Failures != 3 {
			t.Fatalf("replaced password has %d failures, want 3", got.Failures)
		}
		// A failed transaction stores nothing.
		rec.Failures = 4
		_ = db.Update(ctx, func(tx storage.Tx) error {
			if err := b.PutOTP(tx, a, rec); err != nil {
				return err
			}
			return errWrongOTP
		})
		if got := otp(a); got.Failures != 3 {
			t.Fatalf("a rolled back write left %d failures", got.Failures)
		}

		for _, c := range []struct {
			id, method string
			data       []byte
		}{
			{a, contracts.MethodDraw, []byte("\x89PNG drawn")},
			{other, contracts.MethodRender, []byte("Ada Lovelace")},
		} {
			update(func(tx storage.Tx) error { return b.PutSignature(tx, c.id, c.method, c.data) })
			if m, d, ok := sig(c.id); !ok || m != c.method || !bytes.Equal(d, c.data) {
				t.Fatalf("signature of %s read back as %q %q %v", c.method, m, d, ok)
			}
		}
		if err := db.Update(ctx, func(tx storage.Tx) error { return b.PutSignature(tx, a, "stamp", nil) }); err == nil {
			t.Error("an unknown method was stored")
		}

		update(func(tx storage.Tx) error { return b.DeleteOTP(tx, a) })
		if got := otp(a); got != nil {
			t.Fatalf("used password still there: %+v", got)
		}
		update(func(tx storage.Tx) error { return b.PutOTP(tx, other, rec) })
		update(func(tx storage.Tx) error { return b.Forget(tx, []string{a, other}) })
		if _, _, ok := sig(a); ok {
			t.Error("signature of a forgotten signer")
		}
		if _, _, ok := sig(other); ok {
			t.Error("signature of a forgotten signer")
		}
		if got := otp(other); got != nil {
			t.Error("password of a forgotten signer")
		}
		if err := db.Update(ctx, func(tx storage.Tx) error { return b.Forget(tx, []string{"not-a-uuid"}) }); err == nil {
			t.Error("Forget accepted a signer id that is not a uuid")
		}

		// Trails: in the order appended, per contract, kept by Forget,
		// gone with DeleteTrail; a rolled back append leaves nothing.
		c1, c2 := uuid.NewString(), uuid.NewString()
		trail := func(id string) []TrailEvent {
			t.Helper()
			var got []TrailEvent
			if err := db.View(ctx, func(tx storage.Tx) (err error) { got, err = b.Trail(tx, id); return err }); err != nil {
				t.Fatal(err)
			}
			return got
		}
		want := []TrailEvent{
			{At: sent, Kind: TrailCreated, Owner: "alice", KeyID: "k1", KeyName: "CI", IP: "198.51.100.9", UserAgent: "curl/8.5.0"},
			{At: sent, Kind: TrailInvited, SignerID: a, Channel: "email", To: "a•••@example.com"},
			{At: sent.Add(time.Minute), Kind: TrailOTPRefused, SignerID: a, TriesLeft: 4, IP: "2001:db8::1"},
			{At: sent.Add(2 * time.Minute), Kind: TrailSigned, SignerID: a, Method: contracts.MethodDraw, UserAgent: "Mozilla/5.0 “quoted”"},
		}
		for i := range want {
			update(func(tx storage.Tx) error {
				if err := b.AppendTrail(tx, c1, &want[i]); err != nil {
					return err
				}
				// Another contract's steps, in between.
				return b.AppendTrail(tx, c2, &TrailEvent{At: sent, Kind: TrailOpened, SignerID: other})
			})
		}
		_ = db.Update(ctx, func(tx storage.Tx) error {
			if err := b.AppendTrail(tx, c1, &TrailEvent{At: sent, Kind: TrailCompleted}); err != nil {
				return err
			}
			return errWrongOTP
		})
		update(func(tx storage.Tx) error { return b.Forget(tx, []string{a}) })
		if got := trail(c1); !reflect.DeepEqual(got, want) {
			t.Fatalf("trail read back as\n%+v\nwant\n%+v", got, want)
		}
		if got := trail(c2); len(got) != len(want) {
			t.Fatalf("the other contract's trail has %d events, want %d", len(got), len(want))
		}
		update(func(tx storage.Tx) error { return b.DeleteTrail(tx, c1) })
		if got := trail(c1); len(got) != 0 {
			t.Fatalf("a deleted trail still has %d events", len(got))
		}
		if got := trail(c2); len(got) != len(want) {
			t.Fatalf("deleting one trail left %d events of another, want %d", len(got), len(want))
		}
		if err := db.Update(ctx, func(tx storage.Tx) error { return b.AppendTrail(tx, "not-a-uuid", &want[0]) }); err == nil {
			t.Error("AppendTrail accepted a contract id that is not a uuid")
		}
	})
}

// TestBackendOTPHolds checks that OTP holds a signer's password, even
// when there is none yet, until its transaction ends: a second
// transaction's OTP waits, then sees what the first stored. Else two
// first requests for a password would each find none and each send one.
func TestBackendOTPHolds(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		b := newBackend(t, db)
		ctx := context.Background()
		id := uuid.NewString()
		rec := &OTPRecord{Hash: bytes.Repeat([]byte{1}, 32), Salt: bytes.Repeat([]byte{2}, 16), Sent: t0, Expires: t0.Add(otpValidity)}

		held, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			firstDone <- db.Update(ctx, func(tx storage.Tx) error {
				old, err := b.OTP(tx, id)
				if err != nil || old != nil {
					close(held)
					return fmt.Errorf("first read: %+v, %v", old, err)
				}
				close(held)
				<-release
				return b.PutOTP(tx, id, rec)
			})
		}()
		<-held
		var seen *OTPRecord
		secondDone := make(chan error, 1)
		go func() {
			secondDone <- db.Update(ctx, func(tx storage.Tx) (err error) {
				seen, err = b.OTP(tx, id)
				return err
			})
		}()
		select {
		case err := <-secondDone:
			t.Errorf("a second OTP returned (%+v, %v) while the first transaction held the password", seen, err)
			secondDone <- nil
		case <-time.After(100 * time.Millisecond):
		}
		close(release)
		if err := <-firstDone; err != nil {
			t.Fatal(err)
		}
		if err := <-secondDone; err != nil {
			t.Fatal(err)
		}
		if seen == nil || !bytes.Equal(seen.Hash, rec.Hash) {
			t.Fatalf("the second OTP read %+v, want what the first stored", seen)
		}
	})
}
