package freeport

import (
	"fmt"
	"net"
	"testing"
)

func TestTake(t *testing.T) {
	high := ephemeralStart()
	if high-low < 1000 {
		t.Skipf("the ephemeral range starts at %d: Take asks the kernel", high)
	}
	ports, err := Take(8)
	if err != nil {
		t.Fatal(err)
	}
	if len(ports) != 8 {
		t.Fatalf("Take(8) = %v", ports)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d handed out twice in %v", p, ports)
		}
		seen[p] = true
		if p < low || p >= high {
			t.Errorf("port %d outside %d–%d, below the ephemeral range", p, low, high-1)
		}
		// Released on return: the server it is for can bind it.
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Errorf("port %d not free after Take: %v", p, err)
			continue
		}
		l.Close()
	}
}

func TestEphemeralStart(t *testing.T) {
	if s := ephemeralStart(); s <= 0 || s > 32768 {
		t.Errorf("ephemeralStart() = %d, want a port no higher than Linux's default 32768", s)
	}
}
