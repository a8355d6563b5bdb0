package keystore

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/seal"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/upstreams/contracts"
	"github.com/keygate/keygate/upstreams/share"
)

// TestConcurrentUseAndFlush counts uses from many goroutines while flushes,
// key checks and updates run; after a last flush the stored count is the
// number of uses, in memory and on disk.
func TestConcurrentUseAndFlush(t *testing.T) {
	storetest.Run(t, func(t *testing.T, db storage.DB) {
		e := newEnv(t, db)
		k := mustCreate(t, e.keys, `{"service":"share","name":"hot","owner":"o","privileges":["get","list"]}`)
		other := mustCreate(t, e.keys, `{"service":"share","name":"cold","owner":"o","privileges":["get"]}`)
		const workers, uses = 8, 500
		req := Request{Service: access.ServiceShare, Authorization: []string{"Bearer " + k.Token},
			ClientIP: netip.MustParseAddr("192.0.2.1"), Method: "GET", Path: "/webapi/share/x", Now: t0}

		stop := make(chan struct{})
		var bg sync.WaitGroup
		bg.Add(2)
		go func() { // the flush loop of the webapi app
			defer bg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.keys.FlushUsage(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() { // an administrator editing the key meanwhile
			defer bg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := e.keys.Update(k.ID, input(t, fmt.Sprintf(`{"name":"hot %d"}`, i))); err != nil {
					t.Error(err)
					return
				}
				_ = e.keys.List("")
			}
		}()
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < uses; i++ {
					d := Authorize(&req, &share.Operations, e.keys.Lookup)
					if !d.Authorized() {
						t.Errorf("refused: %s", d.Reason)
						return
					}
					_ = d.Identity()
					e.keys.Use(d.Entry, t0.Add(time.Duration(w*uses+i)*time.Millisecond))
				}
			}()
		}
		wg.Wait()
		close(stop)
		bg.Wait()
		if _, err := e.keys.FlushUsage(); err != nil {
			t.Fatal(err)
		}
		const total = workers * uses
		last := t0.Add(time.Duration(total-1) * time.Millisecond)
		for name, ks := range map[string]*Keys{"memory": e.keys, "disk": e.reopen(t)} {
			g, err := ks.Get(k.ID)
			if err != nil {
				t.Fatal(err)
			}
			if g.UsageCount != total {
				t.Errorf("%s: usageCount %d, want %d", name, g.UsageCount, total)
			}
			if g.LastUsageTime == nil || !g.LastUsageTime.Equal(last) {
				t.Errorf("%s: lastUsageTime %v, want %v", name, g.LastUsageTime, last)
			}
			if o, _ := ks.Get(other.ID); o.UsageCount != 0 {
				t.Errorf("%s: unused key counted %d", name, o.UsageCount)
			}
		}
	})
}

func BenchmarkAuthorize(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			ks := benchKeys(b, n)
			req := &Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + ks.token},
				ClientIP: netip.MustParseAddr("2001:db8::7"), Method: "GET", Path: "/webapi/contracts/c1/attachments/a1", Now: t0}
			lookup := ks.keys.Lookup // a method value allocates: take it once, as a handler would
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				d := Authorize(req, &contracts.Operations, lookup)
				if !d.Authorized() {
					b.Fatal(d.Reason)
				}
			}
		})
	}
}

type benchStore struct {
	keys  *Keys
	token string
}

var benchCache = map[int]benchStore{}

// benchKeys fills an in-memory store with n keys (once per size: b.Run
// calls its function again for each b.N) and returns one key's token.
func benchKeys(b *testing.B, n int) benchStore {
	if s, ok := benchCache[n]; ok {
		return s
	}
	ks := memKeys(b)
	var token string
	for i := 0; i < n; i++ {
		k, err := ks.Create(&KeyInput{
			Service: patch.Some("contracts"), Name: patch.Some(fmt.Sprintf("k%d", i)), Owner: patch.Some("o"),
			Privileges: patch.Some([]string{"get", "search"}),
			AllowedIPs: patch.Some([]string{"192.0.2.0/24", "2001:db8::/32"}),
		})
		if err != nil {
			b.Fatal(err)
		}
		token = k.Token
	}
	s := benchStore{ks, token}
	benchCache[n] = s
	return s
}

// BenchmarkAuthorizeTraffic is the key check of a key with two rate-limit
// policies and a quota (limits never reached), and its RateLimit headers.
func BenchmarkAuthorizeTraffic(b *testing.B) {
	ks := memKeys(b)
	k := mustCreate(b, ks, `{"service":"contracts","name":"b","owner":"o","privileges":["get"],
		"rateLimits":[{"name":"second","limit":1000000000,"windowSeconds":1},{"name":"minute","limit":1000000000,"windowSeconds":60}],
		"quota":{"limit":1000000000000,"period":"month"}}`)
	benchAuthorizeLimited(b, ks, k.Token)
}

// BenchmarkAuthorizeScopes is BenchmarkAuthorizeTraffic with every scope
// a key can be counted in (the bench's scopes figure): a policy of the
// key's own, its plan's, and its consumer's with the consumer's quota;
// on bbolt, which keeps plans and consumers (a quota block a write).
func BenchmarkAuthorizeScopes(b *testing.B) {
	ks := newEnv(b, storetest.OpenBolt(b)).keys
	p := mustPlan(b, ks, `{"name":"p","rateLimits":[{"name":"plan-second","limit":1000000000,"windowSeconds":1}]}`)
	c := mustConsumer(b, ks, `{"name":"c","rateLimits":[{"name":"minute","limit":1000000000,"windowSeconds":60}],
		"quota":{"limit":1000000000000,"period":"month"}}`)
	k := mustCreate(b, ks, `{"service":"contracts","name":"b","owner":"o","privileges":["get"],
		"rateLimits":[{"name":"own","limit":1000000000,"windowSeconds":60}],"planId":"`+p.ID+`","consumerId":"`+c.ID+`"}`)
	benchAuthorizeLimited(b, ks, k.Token)
}

// benchAuthorizeLimited times the key check of token, which has
// policies, and its RateLimit headers.
func benchAuthorizeLimited(b *testing.B, ks *Keys, token string) {
	req := &Request{Service: access.ServiceContracts, Authorization: []string{"Bearer " + token},
		ClientIP: netip.MustParseAddr("2001:db8::7"), Method: "GET", Path: "/webapi/contracts/c1/attachments/a1"}
	lookup := ks.Lookup
	b.ReportAllocs()
	for b.Loop() {
		req.Now = time.Now()
		d := Authorize(req, &contracts.Operations, lookup)
		if !d.Authorized() {
			b.Fatal(d.Reason)
		}
		if p, c := d.RateLimitHeaders(req.Now); p == "" || c == "" {
			b.Fatal("no headers")
		}
	}
}

// memKeys is a key store in memory.
func memKeys(b *testing.B) *Keys {
	sealer, err := seal.New(randomKey(b))
	if err != nil {
		b.Fatal(err)
	}
	ks, err := Open(newMemBackend(), sealer, nil)
	if err != nil {
		b.Fatal(err)
	}
	return ks
}
