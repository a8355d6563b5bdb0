//go:build !linux

package listenaddr

import (
	"errors"
	"net/netip"
)

// HeldByOthers needs Linux's /proc; elsewhere it answers
// errors.ErrUnsupported and a second gateway on the same ports is not
// found out.
func HeldByOthers() ([]netip.AddrPort, error) { return nil, errors.ErrUnsupported }

// Supported tells whether HeldByOthers can answer here.
const Supported = false
