package share

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Argon2Params are the Argon2id cost parameters for new share passwords.
// Stored hashes carry their own parameters, so changing these never breaks
// an existing share.
type Argon2Params struct {
	Memory  uint32 // KiB
	Time    uint32
	Threads uint8
}

// DefaultArgon2Params is OWASP's recommended Argon2id setting (19 MiB, 2
// passes, 1 thread).
var DefaultArgon2Params = Argon2Params{Memory: 19 * 1024, Time: 2, Threads: 1}

const (
	argonSaltLen = 16
	argonKeyLen  = 32
)

var b64 = base64.RawStdEncoding

// hasher hashes and checks passwords. Each Argon2id run takes Memory KiB,
// so at most GOMAXPROCS of them run at once: a burst of creates or unlock
// attempts queues instead of exhausting memory.
type hasher struct {
	params Argon2Params
	slots  chan struct{}
}

func newHasher(p Argon2Params) *hasher {
	if p.Memory == 0 || p.Time == 0 || p.Threads == 0 {
		p = DefaultArgon2Params
	}
	return &hasher{params: p, slots: make(chan struct{}, runtime.GOMAXPROCS(0))}
}

// hash returns a PHC-style string:
// $argon2id$v=19$m=<KiB>,t=<passes>,p=<threads>$<salt>$<hash>.
func (h *hasher) hash(password string) (string, error) {
	salt := make([]byte, argonSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	p := h.params
	h.slots <- struct{}{}
	key := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, argonKeyLen)
	<-h.slots
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Time, p.Threads, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

var errBadHash = errors.New("share: unreadable password hash")

// verify reports whether password matches encoded, comparing in constant
// time.
func (h *hasher) verify(encoded, password string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, errBadHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, errBadHash
	}
	var p Argon2Params
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Time, &p.Threads); err != nil ||
		p.Memory == 0 || p.Time == 0 || p.Threads == 0 {
		return false, errBadHash
	}
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false, errBadHash
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, errBadHash
	}
	h.slots <- struct{}{}
	got := argon2.IDKey([]byte(password), salt, p.Time, p.Memory, p.Threads, uint32(len(want)))
	<-h.slots
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}
