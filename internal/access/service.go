package access

// Service is the API a key belongs to; a key is of no use on the other.
type Service string

const (
	ServiceContracts Service = "contracts"
	ServiceShare     Service = "share"
)

// Privilege names an operation a key may be used for.
type Privilege string

// Contract Signing privileges and External Share privileges
// (docs/clients.md). On share, create also grants update and get grants activity:
// that mapping lives in the share operation table, not here.
const (
	PrivGet     Privilege = "get"
	PrivSearch  Privilege = "search"
	PrivCreate  Privilege = "create"
	PrivArchive Privilege = "archive"
	PrivDelete  Privilege = "delete"
	PrivList    Privilege = "list"
)

// Privileges returns the privileges a key of s may hold, in the order docs/clients.md lists them.
func (s Service) Privileges() []Privilege {
	switch s {
	case ServiceContracts:
		return []Privilege{PrivGet, PrivSearch, PrivCreate, PrivArchive, PrivDelete}
	case ServiceShare:
		return []Privilege{PrivGet, PrivList, PrivCreate, PrivDelete}
	}
	return nil
}

// Valid reports whether s is one of the two services.
func (s Service) Valid() bool { return s == ServiceContracts || s == ServiceShare }

// Allows reports whether p is a privilege of s.
func (s Service) Allows(p Privilege) bool {
	for _, q := range s.Privileges() {
		if p == q {
			return true
		}
	}
	return false
}
