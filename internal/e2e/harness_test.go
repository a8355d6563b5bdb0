package e2e

import (
	"net/http"
	"testing"

	"github.com/keygate/keygate/internal/gatewayproc"
)

// The harness itself: a gateway starts, takes a key, answers with it, and
// stops cleanly.
func TestHarnessStartsAndStops(t *testing.T) {
	g := start(t, gatewayproc.Options{})
	k, err := g.CreateKey("contracts", "harness", "alice", []string{"get"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", g.Site+"/webapi/contracts/00000000-0000-4000-8000-000000000000", nil)
	req.Header.Set("Authorization", "Bearer "+k.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET an unknown contract with a valid key: %d, want 404", resp.StatusCode)
	}
}
