package listenaddr

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMain doubles as another process that listens: with
// LISTENADDR_LISTEN set, the test binary listens there, prints the
// address and waits for its standard input to close.
func TestMain(m *testing.M) {
	if addr := os.Getenv("LISTENADDR_LISTEN"); addr != "" {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(l.Addr())
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

func TestReaches(t *testing.T) {
	loop := Addr{IP: netip.MustParseAddr("127.0.0.1"), FirstPort: 2019, LastPort: 2019}
	every := Addr{FirstPort: 8080, LastPort: 8081}
	one := Addr{IP: netip.MustParseAddr("192.0.2.7"), FirstPort: 443}
	for _, tc := range []struct {
		a    Addr
		to   string
		want bool
	}{
		{loop, "127.0.0.1:2019", true},
		{loop, "127.1.2.3:2019", true},
		{loop, "[::1]:2019", true},
		{loop, "[::ffff:127.0.0.1]:2019", true},
		{loop, "0.0.0.0:2019", true},
		{loop, "127.0.0.1:2020", false},
		{loop, "192.0.2.7:2019", false},
		{every, "127.0.0.1:8080", true},
		{every, "[::1]:8081", true},
		{every, "[::]:8080", true},
		{every, "127.0.0.1:8082", false},
		{every, "93.184.215.14:8080", false},
		{one, "192.0.2.7:443", true},
		{one, "0.0.0.0:443", true},
		{one, "127.0.0.1:443", false},
		{one, "192.0.2.8:443", false},
	} {
		if got := tc.a.Reaches(ap(tc.to).Addr(), ap(tc.to).Port()); got != tc.want {
			t.Errorf("%s reached at %s: %v, want %v", tc.a, tc.to, got, tc.want)
		}
	}
	for _, ip := range InterfaceAddrs() {
		if !every.Reaches(ip, 8080) {
			t.Errorf("%s reached at %s: false, want true (an interface's address)", every, ip)
		}
	}
}

func TestOverlaps(t *testing.T) {
	loop := Addr{IP: netip.MustParseAddr("127.0.0.1"), FirstPort: 8080, LastPort: 8080}
	every := Addr{FirstPort: 8080, LastPort: 8080}
	for _, tc := range []struct {
		a     Addr
		other string
		want  bool
	}{
		{loop, "127.0.0.1:8080", true},
		{loop, "0.0.0.0:8080", true},
		{loop, "[::]:8080", true},
		{loop, "[::ffff:127.0.0.1]:8080", true},
		{loop, "127.0.0.2:8080", false},
		{loop, "127.0.0.1:8081", false},
		{every, "10.1.2.3:8080", true},
		{every, "[::1]:8080", true},
		{every, "127.0.0.1:9090", false},
	} {
		if got := tc.a.Overlaps(ap(tc.other)); got != tc.want {
			t.Errorf("%s overlaps %s: %v, want %v", tc.a, tc.other, got, tc.want)
		}
	}
}

// kernelHex is an address as /proc/net/tcp prints it: each 32-bit word
// of the address in memory, printed as a number in host order.
func kernelHex(ip netip.Addr) string {
	b := ip.AsSlice()
	var s strings.Builder
	for i := 0; i < len(b); i += 4 {
		fmt.Fprintf(&s, "%08X", binary.NativeEndian.Uint32(b[i:]))
	}
	return s.String()
}

func TestListeningTable(t *testing.T) {
	head := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
	line := func(addr string, st string, inode int) string {
		a := ap(addr)
		return fmt.Sprintf("   0: %s:%04X 00000000:0000 %s 00000000:00000000 00:00000000 00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n",
			kernelHex(a.Addr()), a.Port(), st, inode)
	}
	table := head + line("127.0.0.1:2019", "0A", 11) + line("0.0.0.0:8080", "0A", 12) + line("127.0.0.1:8080", "01", 13) +
		line("[::1]:2019", "0A", 14) + line("[2001:db8::5]:443", "0A", 15) + line("[::ffff:10.0.0.1]:80", "0A", 16)
	got, err := listening(strings.NewReader(table))
	if err != nil {
		t.Fatal(err)
	}
	want := []socket{{ap("127.0.0.1:2019"), 11}, {ap("0.0.0.0:8080"), 12}, {ap("[::1]:2019"), 14}, {ap("[2001:db8::5]:443"), 15}, {ap("10.0.0.1:80"), 16}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("listening = %v, want %v", got, want)
	}
	if _, err := listening(strings.NewReader(head + "   0: zz:1F90 00000000:0000 0A 0 0 0 0 0 1 1\n")); err == nil {
		t.Error("a bad address was read")
	}
}

// TestHeldByOthers: a socket this process listens on is its own; one that
// another process listens on is found, until that process ends.
func TestHeldByOthers(t *testing.T) {
	if !Supported {
		t.Skip("HeldByOthers needs /proc")
	}
	mine, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LISTENADDR_LISTEN=127.0.0.1:0")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := netip.ParseAddrPort(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("the other process: %q", line)
	}
	others, err := HeldByOthers()
	if err != nil {
		t.Fatal(err)
	}
	own := netip.MustParseAddrPort(mine.Addr().String())
	var foundTheirs bool
	for _, o := range others {
		foundTheirs = foundTheirs || o == theirs
		if o == own {
			t.Errorf("this process's listener %s is listed as another's", own)
		}
	}
	if !foundTheirs {
		t.Errorf("the other process's listener %s is not listed: %v", theirs, others)
	}

	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	others, err = HeldByOthers()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		if o == theirs {
			t.Errorf("%s is still listed after its process ended", theirs)
		}
	}
}

func TestHostAddrs(t *testing.T) {
	for host, want := range map[string]string{
		"localhost": "[127.0.0.1 ::1]", "LocalHost.": "[127.0.0.1 ::1]", "127.0.0.2": "[127.0.0.2]", "::1": "[::1]",
		"10.0.0.1": "[10.0.0.1]", "example.com": "", "localhost.example.com": "", "2130706433": "",
	} {
		ips, ok := HostAddrs(host)
		if got := fmt.Sprint(ips); ok != (want != "") || ok && got != want {
			t.Errorf("HostAddrs(%q) = %s, %v; want %q", host, got, ok, want)
		}
	}
}
