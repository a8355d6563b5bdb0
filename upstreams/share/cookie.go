package share

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The unlock cookie: set by POST /s/{uuid}/unlock, sent back only to that
// share's pages (Path=/s/{uuid}), valid for 12 hours.
const (
	unlockCookieName = "keygate_share"
	unlockCookieTTL  = 12 * time.Hour
)

// unlockMAC signs uuid, expiry and e-mail. The password hash is part of
// the signed text (it never leaves the server), so changing or removing a
// share's password ends every cookie issued under the old one.
func (s *Store) unlockMAC(r *Record, expiry int64, email string) []byte {
	m := hmac.New(sha256.New, s.cookieKey)
	m.Write([]byte("keygate share unlock v1\x00"))
	m.Write([]byte(r.UUID))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(expiry, 10)))
	m.Write([]byte{0})
	m.Write([]byte(email))
	m.Write([]byte{0})
	m.Write([]byte(r.PasswordHash))
	return m.Sum(nil)
}

// unlockCookie is the cookie for r and email, issued at now. Its value is
// expiry.email.mac, the last two base64url.
func (s *Store) unlockCookie(r *Record, email string, now time.Time, secure bool) *http.Cookie {
	expires := now.Add(unlockCookieTTL)
	exp := expires.Unix()
	enc := base64.RawURLEncoding
	return &http.Cookie{
		Name:     unlockCookieName,
		Value:    strconv.FormatInt(exp, 10) + "." + enc.EncodeToString([]byte(email)) + "." + enc.EncodeToString(s.unlockMAC(r, exp, email)),
		Path:     "/s/" + r.UUID,
		Expires:  expires,
		MaxAge:   int(unlockCookieTTL / time.Second),
		HttpOnly: true,
		Secure:   secure,
		// Strict: a page opened from another site carries no unlock, so
		// a form posted from there cannot write as the visitor.
		SameSite: http.SameSiteStrictMode,
	}
}

// unlockedBy returns the e-mail of a valid unlock cookie of r in req
// (comparing MACs in constant time); ok is false when there is none.
func (s *Store) unlockedBy(req *http.Request, r *Record, now time.Time) (email string, ok bool) {
	enc := base64.RawURLEncoding
	for _, c := range req.CookiesNamed(unlockCookieName) {
		parts := strings.Split(c.Value, ".")
		if len(parts) != 3 {
			continue
		}
		exp, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil || now.Unix() >= exp {
			continue
		}
		e, err1 := enc.DecodeString(parts[1])
		mac, err2 := enc.DecodeString(parts[2])
		if err1 != nil || err2 != nil {
			continue
		}
		if hmac.Equal(mac, s.unlockMAC(r, exp, string(e))) {
			return string(e), true
		}
	}
	return "", false
}
