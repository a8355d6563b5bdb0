package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/keygate/keygate/internal/listenaddr"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/storage"
	"github.com/keygate/keygate/internal/testkit/storetest"
	"github.com/keygate/keygate/internal/testkit/testwait"
)

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// TestTargetsCheck: public unicast addresses only, unless the operator
// allows a network; this gateway's own addresses never.
func TestTargetsCheck(t *testing.T) {
	admin := listenaddr.Addr{IP: netip.MustParseAddr("127.0.0.1"), FirstPort: 2019, LastPort: 2019}
	site := listenaddr.Addr{FirstPort: 8080, LastPort: 8080} // every address
	page := listenaddr.Addr{IP: netip.MustParseAddr("10.20.0.5"), FirstPort: 8443, LastPort: 8444}
	var iface netip.Addr // an address of one of this machine's interfaces, if it has one
	for _, a := range listenaddr.InterfaceAddrs() {
		if !a.IsLoopback() {
			iface = a
			break
		}
	}
	def := &Targets{}
	opened := &Targets{Allow: prefixes("10.20.0.0/16", "127.0.0.0/8", "::1/128", "0.0.0.0/0", "::/0"), Self: []listenaddr.Addr{admin, site, page}}
	for _, tc := range []struct {
		addr        string
		def, opened string // "" allowed, else a word of the refusal
	}{
		{"93.184.215.14:443", "", ""},
		{"[2606:4700::1111]:443", "", ""},
		{"127.0.0.1:9000", "loopback", ""},
		{"127.8.9.10:9000", "loopback", ""},
		{"[::1]:9000", "loopback", ""},
		{"[::ffff:127.0.0.1]:9000", "loopback", ""},
		{"10.0.0.1:443", "private", ""},
		{"10.20.3.4:443", "private", ""},
		{"172.16.0.1:443", "private", ""},
		{"172.31.255.255:443", "private", ""},
		{"192.168.1.1:443", "private", ""},
		{"[::ffff:192.168.1.1]:443", "private", ""},
		{"100.64.0.1:443", "carrier-grade NAT", ""},
		{"169.254.169.254:80", "link-local", ""},
		{"[fe80::1]:443", "link-local", ""},
		{"[fc00::1]:443", "unique-local", ""},
		{"[fd12:3456::1]:443", "unique-local", ""},
		{"0.0.0.0:443", "unspecified", ""},
		{"[::]:443", "unspecified", ""},
		{"224.0.0.1:443", "multicast", ""},
		{"[ff02::1]:443", "multicast", ""},
		{"255.255.255.255:443", "reserved", ""},
		{"192.0.2.1:443", "documentation", ""},
		{"[64:ff9b::a00:1]:443", "NAT64", ""},
		{"[::127.0.0.1]:443", "IPv4-compatible", ""},
		{"[::a9fe:a9fe]:443", "IPv4-compatible", ""},
		{"[::ffff:0:a9fe:a9fe]:443", "IPv4-translated", ""},
		{"[2001::a9fe:a9fe]:443", "Teredo", ""},
		{"[2001:2::1]:443", "benchmarking", ""},
		{"[2001:20::1]:443", "ORCHID", ""},
		{"[3fff::1]:443", "documentation", ""},
		{"[5f00::1]:443", "segment routing", ""},
		{"192.88.99.1:443", "6to4 relay", ""},
		{"[2001:4860:4860::8888]:443", "", ""},
		// The gateway's own: its admin endpoint through any loopback
		// address, its listener on every address through any local one.
		{"127.0.0.1:2019", "loopback", "own address"},
		{"127.0.0.2:2019", "loopback", "own address"},
		{"[::1]:2019", "loopback", "own address"},
		{"0.0.0.0:2019", "unspecified", "own address"},
		{"127.0.0.1:8080", "loopback", "own address"},
		{"[::1]:8080", "loopback", "own address"},
		{"0.0.0.0:8080", "unspecified", "own address"},
		{"10.20.0.5:8443", "private", "own address"},
		{"10.20.0.5:8444", "private", "own address"},
		{"10.20.0.5:8445", "private", ""},
		{"10.20.0.6:8443", "private", ""},
		{"93.184.215.14:8080", "", ""},
	} {
		ap := netip.MustParseAddrPort(tc.addr)
		for _, c := range []struct {
			name string
			t    *Targets
			want string
		}{{"default", def, tc.def}, {"opened", opened, tc.opened}} {
			err := c.t.Check(ap.Addr(), ap.Port())
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s: %s refused: %v", c.name, tc.addr, err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrTargetNotAllowed)):
				t.Errorf("%s: %s: %v, want a refusal saying %q", c.name, tc.addr, err, c.want)
			}
		}
	}
	if iface.IsValid() {
		if err := opened.Check(iface, 8080); err == nil || !strings.Contains(err.Error(), "own address") {
			t.Errorf("%s:8080, an interface's address, reaches the listener on every address: %v", iface, err)
		}
	}
}

// TestSubscriptionTargets: a URL whose host is an IP address or localhost
// that the targets refuse is a 400 naming url, on create and update, and
// changes nothing; a name is left to the connection.
func TestSubscriptionTargets(t *testing.T) { storetest.Run(t, testSubscriptionTargets) }

func testSubscriptionTargets(t *testing.T, db storage.DB) {
	ctx := context.Background()
	s := newStore(t, db, nil)
	s.SetTargets(&Targets{Allow: prefixes("127.0.0.0/8", "::1/128", "10.20.0.0/16"),
		Self: []listenaddr.Addr{{IP: netip.MustParseAddr("127.0.0.1"), FirstPort: 2019, LastPort: 2019}, {FirstPort: 8080, LastPort: 8080}}})
	refused := []string{
		"http://127.0.0.1:2019/stop",
		"http://localhost:2019/load",
		"http://LOCALHOST.:2019/stop",
		"http://[::1]:2019/stop",
		"http://127.0.0.1:8080/webapi/webhooks/x/test",
		"https://169.254.169.254/latest/meta-data/",
		"https://10.0.0.1/hook",
		"https://192.168.0.10/hook",
		"https://[fd00::1]/hook",
		"https://100.64.1.1/hook",
		"https://0.0.0.0:8080/hook",
	}
	for _, u := range refused {
		_, err := s.Create(ctx, &Input{URL: patch.Some(u), Events: patch.Some([]string{"contract.signed"})})
		var d *problem.Details
		if !errors.As(err, &d) || d.Status != http.StatusBadRequest || len(d.Errors) != 1 || d.Errors[0].Field != "url" ||
			d.Errors[0].Code != "not_allowed" || !strings.HasPrefix(d.Errors[0].Message, "target not allowed: ") {
			t.Errorf("create %s: %v", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:9000/hook", "http://localhost:2020/h", "https://10.20.1.1/hook", "https://hooks.example.com/h", "https://93.184.215.14/h"} {
		if _, err := s.Create(ctx, &Input{URL: patch.Some(u), Events: patch.Some([]string{"contract.signed"})}); err != nil {
			t.Errorf("create %s: %v", u, err)
		}
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 5 {
		t.Fatalf("%d subscriptions, %v", len(list), err)
	}
	sub := list[0]
	for _, u := range refused {
		_, err := s.Update(ctx, sub.ID, &Input{URL: patch.Some(u), Description: patch.Some("changed")})
		var d *problem.Details
		if !errors.As(err, &d) || d.Status != http.StatusBadRequest || len(d.Errors) != 1 || d.Errors[0].Field != "url" {
			t.Errorf("update to %s: %v", u, err)
		}
	}
	if got, err := s.Get(ctx, sub.ID); err != nil || got.URL != sub.URL || got.Description != "" {
		t.Errorf("after refused updates: %+v %v", got, err)
	}
	// Without the allowed networks, loopback is refused too.
	s.SetTargets(&Targets{})
	if _, err := s.Update(ctx, sub.ID, &Input{URL: patch.Some("http://127.0.0.1:9001/hook")}); err == nil {
		t.Error("update to loopback accepted without webhook_allow_networks")
	}
}

// TestRefusedTarget: a delivery whose target is refused when it connects
// (a subscription made before the rule, a name that resolves there, the
// gateway's own listener) is not sent, is logged as "target not allowed"
// and is given up at once, not retried.
func TestRefusedTarget(t *testing.T) { storetest.Run(t, testRefusedTarget) }

func testRefusedTarget(t *testing.T, db storage.DB) {
	s := newStore(t, db, nil)
	out := startCountingWorker(t, s)
	ep := newEndpoint(t, nil)
	u, _ := url.Parse(ep.URL)
	port, _ := strconv.Atoi(u.Port())
	// Subscribed while loopback was allowed; by name, so the address is
	// only known when the worker resolves it.
	sub := subscribe(t, s, "http://localhost:"+u.Port()+"/hook", []string{"contract.signed"}, nil)

	for i, c := range []struct {
		targets *Targets
		want    string
	}{
		{&Targets{}, "is a loopback address"},
		{&Targets{Allow: loopbackTargets.Allow, Self: []listenaddr.Addr{{IP: netip.MustParseAddr("127.0.0.1"), FirstPort: uint16(port), LastPort: uint16(port)}}},
			"this gateway's own address"},
	} {
		s.SetTargets(c.targets)
		emit(t, s, "contract.signed", "alice", map[string]string{})
		testwait.For(t, testwait.Generous, "given up", func() bool { return out.get(OutcomeFailed) == i+1 })
		log := attempts(t, s, sub.ID)
		if len(log) != i+1 || log[0].Status != 0 || log[0].Attempt != 1 ||
			!strings.HasPrefix(log[0].Error, "target not allowed: ") || !strings.Contains(log[0].Error, c.want) {
			t.Errorf("log %+v, want 'target not allowed' saying %q", log, c.want)
		}
		if d, e := pending(t, s); d != 0 || e != 0 {
			t.Errorf("still pending: %d deliveries, %d events", d, e)
		}
	}
	if n := len(ep.requests()); n != 0 || out.get(OutcomeRetry) != 0 || out.get(OutcomeSent) != 0 {
		t.Errorf("%d requests reached the receiver; outcomes %v", n, out.n)
	}

	// Allowed again, the next event is delivered.
	s.SetTargets(loopbackTargets)
	emit(t, s, "contract.signed", "alice", map[string]string{})
	ep.waitRequests(t, 1)

	// Refused again: the kept-alive connection of that delivery is not
	// used, the new rules hold at once.
	s.SetTargets(&Targets{})
	emit(t, s, "contract.signed", "alice", map[string]string{})
	testwait.For(t, testwait.Generous, "given up", func() bool { return out.get(OutcomeFailed) == 3 })
	if n := len(ep.requests()); n != 1 {
		t.Errorf("%d requests reached the receiver, want 1", n)
	}
}

// TestDialRefused: both of the worker's clients refuse a target in the
// dialer's Control, which runs before the connection is made.
func TestDialRefused(t *testing.T) {
	s := newStore(t, storetest.OpenBolt(t), nil)
	s.SetTargets(&Targets{})
	w := NewWorker(s, fastConfig())
	ep := newEndpoint(t, nil)
	for _, c := range []*http.Client{w.https, w.plain} {
		if _, err := c.Post(ep.URL, "application/json", nil); !errors.Is(err, ErrTargetNotAllowed) {
			t.Errorf("dial: %v, want target not allowed", err)
		}
	}
	if n := len(ep.requests()); n != 0 {
		t.Errorf("%d requests reached the receiver", n)
	}
}
