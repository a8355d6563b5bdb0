// Package traffic is what a holder of limits may spend: rate-limit
// policies over sliding windows, shared between instances by claims, and
// quotas spent in blocks leased from storage. A holder is whatever its
// caller counts under one id (in keystore, a key or a consumer); the
// package knows nothing of keys. Its storage is a Store, which keystore's
// backends implement.
package traffic

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/keygate/keygate/internal/problem"
)

// RateLimit is one named policy of a holder (a key, a consumer, a plan):
// in any window of WindowSeconds, at most about Limit requests of the
// holder are let through.
type RateLimit struct {
	Name          string `json:"name"`
	Limit         int64  `json:"limit"`
	WindowSeconds int64  `json:"windowSeconds"`
}

const (
	// MaxRateLimits is how many policies a holder may carry.
	MaxRateLimits = 4
	maxRateLimit  = 1_000_000_000
	// MaxRateWindow is a policy's longest window, in seconds.
	MaxRateWindow    = 86_400
	maxPolicyNameLen = 20
)

// CheckRateLimits reads and checks every policy of list, each a JSON
// object as sent, naming every bad field of every policy at once.
func CheckRateLimits(f *problem.Fields, list []json.RawMessage) []RateLimit {
	bad := len(f.List())
	if len(list) > MaxRateLimits {
		f.Add("rateLimits", "too_many", fmt.Sprintf("at most %d rate-limit policies", MaxRateLimits))
		if len(list) > 4*MaxRateLimits {
			// Not each policy too: a body of thousands would be answered
			// with thousands of errors, many times its size.
			return nil
		}
	}
	out := make([]RateLimit, 0, len(list))
	seen := map[string]bool{}
	for i, raw := range list {
		at := fmt.Sprintf("rateLimits[%d]", i)
		in, ok := jsonObject(f, at, raw, "name", "limit", "windowSeconds")
		if !ok {
			continue
		}
		var p RateLimit
		name, ok := jsonString(f, at+".name", in["name"], "a policy needs a name: 1 to 20 characters of a-z, 0-9, _ and -")
		switch {
		case !ok:
		case !validPolicyName(name):
			f.Add(at+".name", "invalid", "name must be 1 to 20 characters of a-z, 0-9, _ and -")
		case name == QuotaPolicy:
			f.Add(at+".name", "reserved", `"quota" names the quota in the RateLimit headers`)
		case seen[name]:
			f.Add(at+".name", "duplicate", fmt.Sprintf("%q names two policies", name))
		default:
			seen[name] = true
			p.Name = name
		}
		p.Limit, _ = wholeNumber(f, at+".limit", in["limit"], 1, maxRateLimit, "limit must be a whole number from 1 to 1000000000")
		p.WindowSeconds, _ = wholeNumber(f, at+".windowSeconds", in["windowSeconds"], 1, MaxRateWindow, "windowSeconds must be a whole number from 1 to 86400")
		out = append(out, p)
	}
	if len(f.List()) > bad {
		return nil
	}
	return out
}

// jsonObject reads raw, the value of field, as a JSON object whose
// members are among names; each other member is an unknown_field, and
// the known ones are checked all the same.
func jsonObject(f *problem.Fields, field string, raw json.RawMessage, names ...string) (map[string]json.RawMessage, bool) {
	var in map[string]json.RawMessage
	if err := json.Unmarshal(raw, &in); err != nil || in == nil {
		f.Add(field, "invalid", field+" must be a JSON object")
		return nil, false
	}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		if !slices.Contains(names, k) {
			f.Add(field+"."+k, "unknown_field", fmt.Sprintf("%s has no field %q (it has %s)", field, k, strings.Join(names, ", ")))
		}
	}
	return in, true
}

// jsonString reads a required JSON string.
func jsonString(f *problem.Fields, field string, raw json.RawMessage, msg string) (string, bool) {
	var s string
	switch {
	case raw == nil || string(raw) == "null":
		f.Add(field, "required", msg)
		return "", false
	case json.Unmarshal(raw, &s) != nil:
		f.Add(field, "invalid", msg)
		return "", false
	}
	return s, true
}

// wholeNumber reads a required JSON number that is a whole number within
// [lo, hi]: 20, 20.0 and 2e1 alike.
func wholeNumber(f *problem.Fields, field string, raw json.RawMessage, lo, hi int64, msg string) (int64, bool) {
	if raw == nil || string(raw) == "null" {
		f.Add(field, "required", msg)
		return 0, false
	}
	if c := raw[0]; c != '-' && (c < '0' || c > '9') {
		f.Add(field, "invalid", msg) // a string, a boolean, an object
		return 0, false
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	switch {
	case err != nil && errors.Is(err, strconv.ErrRange):
		f.Add(field, "out_of_range", msg)
		return 0, false
	case err != nil || v != math.Trunc(v):
		f.Add(field, "invalid", msg)
		return 0, false
	case v < float64(lo) || v > float64(hi):
		f.Add(field, "out_of_range", msg)
		return 0, false
	}
	return int64(v), true
}

func validPolicyName(s string) bool {
	if len(s) == 0 || len(s) > maxPolicyNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
