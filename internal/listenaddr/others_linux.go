package listenaddr

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// HeldByOthers lists the listening TCP sockets of this network namespace
// that this process does not hold: the kernel's socket tables
// (/proc/self/net/tcp and tcp6, which a /proc mounted with subset=pid,
// as systemd's ProcSubset=pid does, still shows where it hides
// /proc/net) less the sockets among this process's open files
// (/proc/self/fd). Caddy listens with SO_REUSEPORT, so a second
// process binds the same address without an error and the kernel splits
// the connections between the two; this is how the second one finds out.
func HeldByOthers() ([]netip.AddrPort, error) {
	own, err := ownSockets()
	if err != nil {
		return nil, err
	}
	var out []netip.AddrPort
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if os.IsNotExist(err) && strings.HasSuffix(table, "6") {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		socks, err := listening(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", table, err)
		}
		for _, s := range socks {
			if !own[s.inode] {
				out = append(out, s.addr)
			}
		}
	}
	return out, nil
}

// Supported tells whether HeldByOthers can answer here.
const Supported = true

// ownSockets are the inodes of this process's sockets.
func ownSockets() (map[uint64]bool, error) {
	dir := "/proc/self/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	own := map[uint64]bool{}
	for _, e := range entries {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if s, ok := strings.CutPrefix(link, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(s, "]"), 10, 64); err == nil {
				own[n] = true
			}
		}
	}
	return own, nil
}

type socket struct {
	addr  netip.AddrPort
	inode uint64
}

// listening reads a /proc/net/tcp or tcp6 table and returns the sockets
// in the LISTEN state (0A). Addresses are hex words in the kernel's byte
// order, the port in hex.
func listening(r io.Reader) ([]socket, error) {
	var out []socket
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	first := true
	for sc.Scan() {
		if first { // the header
			first = false
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			return nil, fmt.Errorf("a line of %d fields", len(f))
		}
		if f[3] != "0A" {
			continue
		}
		hexAddr, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			return nil, fmt.Errorf("local address %q", f[1])
		}
		raw, err := hex.DecodeString(hexAddr)
		if err != nil || len(raw) != 4 && len(raw) != 16 {
			return nil, fmt.Errorf("local address %q", f[1])
		}
		// Each 32-bit word was printed as a number in host order.
		b := make([]byte, len(raw))
		for i := 0; i < len(raw); i += 4 {
			binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
		}
		ip, _ := netip.AddrFromSlice(b)
		port, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil {
			return nil, fmt.Errorf("local port %q", hexPort)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q", f[9])
		}
		out = append(out, socket{netip.AddrPortFrom(ip.Unmap(), uint16(port)), inode})
	}
	return out, sc.Err()
}
