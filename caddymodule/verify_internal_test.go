package caddymodule

import (
	"net/netip"
	"testing"

	"golang.org/x/time/rate"
)

// TestVerifyLimitHoldsUnderManyAddresses: a flood from more addresses
// than are remembered does not give an address that spent its checks
// new ones.
func TestVerifyLimitHoldsUnderManyAddresses(t *testing.T) {
	h := &Verify{limiters: &verifyLimiters{all: make(map[netip.Prefix]*rate.Limiter)}}
	spent := netip.MustParseAddr("192.0.2.1")
	for range verifyBurst {
		if _, ok := h.allow(spent); !ok {
			t.Fatal("refused within the burst")
		}
	}
	for i := range maxVerifyUsers + 100 {
		h.allow(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	if _, ok := h.allow(spent); ok {
		t.Error("the spent address got a check back after a flood of other addresses")
	}
	if len(h.limiters.all) > maxVerifyUsers {
		t.Errorf("%d addresses remembered, at most %d", len(h.limiters.all), maxVerifyUsers)
	}
}
