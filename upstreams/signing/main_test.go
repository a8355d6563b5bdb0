package signing

import (
	"os"
	"testing"

	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// TestMain stops the throwaway PostgreSQL that storetest starts.
//
// The tests run each on both backends (storetest.Run) and in parallel
// with each other (t.Parallel): each has its own database, mail and SMS
// servers and clock, and their PostgreSQL halves mostly wait on the
// server.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
