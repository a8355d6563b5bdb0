package keyimport

import (
	"os"
	"testing"

	"github.com/keygate/keygate/internal/testkit/pgtest"
)

// TestMain stops the throwaway PostgreSQL that storetest starts.
func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
