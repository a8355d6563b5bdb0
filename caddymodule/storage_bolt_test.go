package caddymodule

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/bbolt"
	"go.uber.org/zap"
)

// TestFileCutBeforeItsFreelist: a database file cut short before its
// freelist page (which a writable bbolt.Open reads through its memory
// map, a fault past the end of the file) is refused with a message
// naming it, not a crash. The open runs in a second process, the test
// binary itself (TestMain), so that a crash fails this test only.
func TestFileCutBeforeItsFreelist(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "webapi.db")
	s, err := openState(BoltStorage{}, dir, filepath.Join(dir, "master.key"), 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Destruct(); err != nil {
		t.Fatal(err)
	}

	// Find the freelist page, and cut the file where it starts.
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	pageSize := db.Info().PageSize
	freelist, size := -1, int64(0)
	err = db.View(func(tx *bbolt.Tx) error {
		size = tx.Size()
		for id := 2; int64(id*pageSize) < size; id++ {
			p, err := tx.Page(id)
			if err != nil {
				return err
			}
			if p != nil && p.Type == "freelist" {
				freelist = id
			}
		}
		return nil
	})
	db.Close()
	if err != nil || freelist < 2 {
		t.Fatalf("no freelist page found (%v)", err)
	}
	cut := int64(freelist * pageSize)
	if err := os.Truncate(path, cut); err != nil {
		t.Fatal(err)
	}

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEYGATE_TEST_OPEN_DB="+path)
	out, err := cmd.CombinedOutput()
	for _, bad := range []string{"SIGBUS", "fatal error", "panic", "goroutine "} {
		if strings.Contains(string(out), bad) {
			t.Fatalf("the open crashed (%s):\n%.2000s", bad, out)
		}
	}
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 3 {
		t.Fatalf("second process: %v, output %s", err, out)
	}
	if !strings.Contains(string(out), path) || !strings.Contains(string(out), "is truncated") {
		t.Errorf("unclear message (file cut at %d of %d bytes): %s", cut, size, out)
	}
	// The refused file is neither grown nor changed.
	if st, err := os.Stat(path); err != nil {
		t.Error(err)
	} else if st.Size() != cut {
		t.Errorf("the file is now %d bytes, was cut at %d", st.Size(), cut)
	}
}
