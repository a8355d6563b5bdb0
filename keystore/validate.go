package keystore

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/keygate/keygate/internal/access"
	"github.com/keygate/keygate/internal/patch"
	"github.com/keygate/keygate/internal/problem"
	"github.com/keygate/keygate/internal/text"
)

// KeyInput is the body of a key create (every field) or update (the
// editable ones). Absent fields keep their value on update; null clears
// the validity bounds.
type KeyInput struct {
	Service        patch.Field[string]   `json:"service"`
	Name           patch.Field[string]   `json:"name"`
	Description    patch.Field[string]   `json:"description"`
	Owner          patch.Field[string]   `json:"owner"`
	Privileges     patch.Field[[]string] `json:"privileges"`
	NotValidBefore patch.Field[string]   `json:"notValidBefore"`
	NotValidAfter  patch.Field[string]   `json:"notValidAfter"`
	AllowedIPs     patch.Field[[]string] `json:"allowedIps"`
	AdminProjects  patch.Field[[]string] `json:"adminProjects"`
	// Enabled switches the key off (false) and on again; true at creation
	// when absent.
	Enabled patch.Field[bool] `json:"enabled"`
	// RateLimits replaces the key's policies; null or [] removes them.
	// Each is read field by field, so that every bad field of every
	// policy is named at once (checkRateLimits).
	RateLimits patch.Field[[]json.RawMessage] `json:"rateLimits"`
	// Quota replaces the key's quota; null removes it.
	Quota patch.Field[json.RawMessage] `json:"quota"`
	// ConsumerID puts the key under a consumer; null takes it out.
	ConsumerID patch.Field[string] `json:"consumerId"`
	// PlanID gives the key a plan; null takes it away.
	PlanID patch.Field[string] `json:"planId"`
}

const (
	// MaxNameLen is the longest name of a key, in runes.
	MaxNameLen       = 40
	maxOwnerLen      = 255
	maxAllowedIPs    = 1000
	maxAdminProjects = 1000
	// maxPrivileges is more than a service has, so that a list longer
	// is refused as a whole and not privilege by privilege.
	maxPrivileges = 16
)

// applyCreate checks in as a create and returns the new key's fields. Every
// violation is listed in the returned problem.
func applyCreate(in *KeyInput) (Key, error) {
	var f problem.Fields
	var k Key
	switch {
	case !in.Service.Set || in.Service.Null || in.Service.Value == "":
		f.Add("service", "required", "service is required: contracts or share")
	case !access.Service(in.Service.Value).Valid():
		f.Add("service", "invalid", "service must be contracts or share")
	default:
		k.Service = access.Service(in.Service.Value)
	}
	if !in.Name.Set || in.Name.Null {
		f.Add("name", "required", "name is required")
	}
	if !in.Owner.Set || in.Owner.Null || in.Owner.Value == "" {
		f.Add("owner", "required", "owner is required")
	} else if !text.PrintableASCII(in.Owner.Value, maxOwnerLen) {
		f.Add("owner", "invalid", "owner must be 1 to 255 printable US-ASCII characters")
	} else {
		k.Owner = in.Owner.Value
	}
	if !in.Privileges.Set || in.Privileges.Null {
		f.Add("privileges", "required", "privileges must name at least one privilege")
	}
	k.AllowedIPs = []string{}
	k.Enabled = true
	applyEditable(&f, &k, in)
	return k, f.Err()
}

// applyUpdate checks in as an update of k and returns the changed key.
func applyUpdate(k Key, in *KeyInput) (Key, error) {
	var f problem.Fields
	if in.Service.Set {
		f.Add("service", "immutable", "service is fixed at creation")
	}
	if in.Owner.Set {
		f.Add("owner", "immutable", "owner is fixed at creation")
	}
	if in.Name.Set && in.Name.Null {
		f.Add("name", "required", "name cannot be removed")
	}
	if in.Privileges.Set && in.Privileges.Null {
		f.Add("privileges", "required", "privileges must name at least one privilege")
	}
	k.Privileges = append([]access.Privilege(nil), k.Privileges...)
	applyEditable(&f, &k, in)
	return k, f.Err()
}

// applyEditable checks and applies the fields both create and update take.
func applyEditable(f *problem.Fields, k *Key, in *KeyInput) {
	if in.Name.Set && !in.Name.Null {
		if !text.Printable(in.Name.Value, MaxNameLen) {
			f.Add("name", "invalid", "name must be 1 to 40 printable characters")
		} else {
			k.Name = in.Name.Value
		}
	}
	if in.Description.Set {
		if text.CheckDescription(f, in.Description.Value) {
			k.Description = in.Description.Value
		}
	}
	if in.Privileges.Set && !in.Privileges.Null {
		k.Privileges = CheckPrivileges(f, k.Service, in.Privileges.Value)
	}
	nvb, okB := checkTime(f, "notValidBefore", in.NotValidBefore)
	nva, okA := checkTime(f, "notValidAfter", in.NotValidAfter)
	if okB && in.NotValidBefore.Set {
		k.NotValidBefore = nvb
	}
	if okA && in.NotValidAfter.Set {
		k.NotValidAfter = nva
	}
	if okA && okB && k.NotValidBefore != nil && k.NotValidAfter != nil && !k.NotValidAfter.After(*k.NotValidBefore) {
		f.Add("notValidAfter", "invalid", "notValidAfter must be later than notValidBefore")
	}
	if in.AllowedIPs.Set {
		k.AllowedIPs = checkRanges(f, in.AllowedIPs.Value)
	}
	if in.AdminProjects.Set {
		k.AdminProjects = checkAdminProjects(f, k.Service, in.AdminProjects.Value)
	}
	applyLimits(f, in.RateLimits, in.Quota, &k.RateLimits, &k.Quota)
	if in.ConsumerID.Set {
		k.ConsumerID = optionalID(in.ConsumerID)
	}
	if in.PlanID.Set {
		k.PlanID = optionalID(in.PlanID)
	}
	if in.Enabled.Set {
		if in.Enabled.Null {
			f.Add("enabled", "invalid", "enabled must be true or false")
		} else {
			k.Enabled = in.Enabled.Value
		}
	}
}

// CheckPrivileges checks list as the privileges of a key of s, adding
// each problem to f, and returns them; the importers check a privileges
// map's groups with it.
func CheckPrivileges(f *problem.Fields, s access.Service, list []string) []access.Privilege {
	if len(list) == 0 {
		f.Add("privileges", "required", "privileges must name at least one privilege")
		return nil
	}
	if len(list) > maxPrivileges {
		f.Add("privileges", "too_many", fmt.Sprintf("privileges lists at most %d privileges, each once", maxPrivileges))
		return nil
	}
	out := make([]access.Privilege, 0, len(list))
	seen := map[access.Privilege]bool{}
	for i, p := range list {
		field := fmt.Sprintf("privileges[%d]", i)
		switch {
		case s == "" && !access.ServiceContracts.Allows(access.Privilege(p)) && !access.ServiceShare.Allows(access.Privilege(p)):
			// The service is itself invalid: still report what no service knows.
			f.Add(field, "unknown_privilege", fmt.Sprintf("%q is not a privilege of any service", p))
		case s != "" && !s.Allows(access.Privilege(p)):
			f.Add(field, "unknown_privilege", fmt.Sprintf("%q is not a privilege of %s keys (%s)", p, s, joinPrivileges(s.Privileges())))
		case seen[access.Privilege(p)]:
			f.Add(field, "duplicate", fmt.Sprintf("%q is listed twice", p))
		default:
			seen[access.Privilege(p)] = true
			out = append(out, access.Privilege(p))
		}
	}
	return out
}

func joinPrivileges(ps []access.Privilege) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return strings.Join(s, ", ")
}

// checkTime parses an RFC 3339 bound; null clears it (nil, true).
func checkTime(f *problem.Fields, field string, o patch.Field[string]) (*time.Time, bool) {
	if !o.Set || o.Null {
		return nil, true
	}
	t, err := time.Parse(time.RFC3339Nano, o.Value)
	if err != nil {
		f.Add(field, "invalid", field+" must be an RFC 3339 time such as 2026-01-31T12:00:00Z")
		return nil, false
	}
	t = t.UTC()
	return &t, true
}

func checkRanges(f *problem.Fields, list []string) []string {
	if len(list) > maxAllowedIPs {
		f.Add("allowedIps", "too_many", "allowedIps holds at most 1000 entries")
		return nil
	}
	out := make([]string, 0, len(list))
	for i, s := range list {
		p, ok := parseRange(strings.TrimSpace(s))
		if !ok {
			f.Add(fmt.Sprintf("allowedIps[%d]", i), "invalid", fmt.Sprintf("%q is not an IP address or CIDR range", s))
			continue
		}
		if p.IsSingleIP() {
			out = append(out, p.Addr().String())
		} else {
			out = append(out, p.String())
		}
	}
	return out
}

func checkAdminProjects(f *problem.Fields, s access.Service, list []string) []string {
	if s == access.ServiceContracts && len(list) > 0 {
		f.Add("adminProjects", "invalid", "adminProjects is only for share keys")
		return nil
	}
	if len(list) > maxAdminProjects {
		f.Add("adminProjects", "too_many", "adminProjects holds at most 1000 projects")
		return nil
	}
	out := make([]string, 0, len(list))
	for i, p := range list {
		if !text.PrintableASCII(p, 255) {
			f.Add(fmt.Sprintf("adminProjects[%d]", i), "invalid", "a project id is 1 to 255 printable US-ASCII characters, or *")
			continue
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// optionalID is the id a reference field sets: nil for null.
func optionalID(f patch.Field[string]) *string {
	if f.Null {
		return nil
	}
	v := f.Value
	return &v
}
