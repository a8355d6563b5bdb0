// Package freeport chooses loopback TCP ports for servers a test starts
// later or in another process (a gateway, PostgreSQL, Redmine,
// Prometheus).
//
// Such a port is free when chosen and bound only when the server starts,
// which under load can take seconds. A port from the kernel's ephemeral
// range (net.Listen on port 0) may meanwhile become the source port of
// any outgoing connection on the machine, and the tests beside make
// thousands of them; the server then fails with "address already in
// use". The ports chosen here lie below that range, where only another
// test's explicit choice can take them.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
)

// low is the first port chosen from; the ports the tests fix
// (caddymodule's 2999, 9080 and 9443, PostgreSQL's 5432) lie below it.
const low = 20000

// Take returns n distinct loopback ports that nothing listens on now. It
// holds each until all are chosen, so none is handed out twice.
func Take(n int) ([]int, error) {
	high := ephemeralStart()
	if high-low < 1000 {
		// A kernel whose ephemeral range starts this low leaves no room
		// below it: the kernel's own choice is the best left.
		return fromKernel(n)
	}
	var ports []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("freeport: no %d free ports among %d tried in %d–%d", n, tries, low, high-1)
		}
		p := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue // in use
		}
		held = append(held, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// One returns one loopback port that nothing listens on now.
func One() (int, error) {
	p, err := Take(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (Linux's default when it cannot be read), capped at that default.
func ephemeralStart() int {
	start := 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return start
	}
	var first, last int
	if _, err := fmt.Sscan(string(b), &first, &last); err != nil || first <= 0 {
		return start
	}
	return min(first, start)
}

func fromKernel(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("freeport: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
