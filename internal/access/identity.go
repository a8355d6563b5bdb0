package access

import "context"

// Identity is what an API handler learns of the key that authorized a
// request: every authorized use is an action of Owner. It is shared by
// every request of the same key and operation: read it, never change it.
type Identity struct {
	KeyID         string
	KeyName       string
	Owner         string
	Service       Service
	Privileges    []Privilege
	AdminProjects []string
	Operation     string
	// ConsumerID and PlanID are the key's consumer and plan, "" for none:
	// for the audit log.
	ConsumerID, PlanID string
}

// AdminOf reports whether the owner has admin rights in project
// (adminProjects lists it, or holds "*").
func (id *Identity) AdminOf(project string) bool {
	for _, p := range id.AdminProjects {
		if p == "*" || (project != "" && p == project) {
			return true
		}
	}
	return false
}

// AdminOfAll reports whether adminProjects holds "*".
func (id *Identity) AdminOfAll() bool {
	for _, p := range id.AdminProjects {
		if p == "*" {
			return true
		}
	}
	return false
}

type identityKey struct{}

// WithIdentity returns a context carrying id for the handlers behind the key check.
func WithIdentity(ctx context.Context, id *Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the identity set by WithIdentity, or nil.
func IdentityFrom(ctx context.Context) *Identity {
	id, _ := ctx.Value(identityKey{}).(*Identity)
	return id
}
