package e2e

import (
	"net/http"
	"testing"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
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

// apiKeys are the keys most tests call the APIs with: a contracts key that
// may get, search and create, and a share key of an administrator of
// every project that may get, list and create.
type apiKeys struct{ contracts, share gatewayproc.Key }

// prepareAPIs stores template PAGE-1 (title "<label> NDA") and creates the
// two keys, named after label.
func prepareAPIs(t *testing.T, g *gatewayproc.Gateway, label string) apiKeys {
	t.Helper()
	if err := g.AddTemplate("PAGE-1", "LEGAL", label+" NDA", "Keep each other's secrets."); err != nil {
		t.Fatal(err)
	}
	ck, err := g.CreateKey("contracts", label+" contracts", "alice", []string{"get", "search", "create"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sk, err := g.CreateKey("share", label+" shares", "alice", []string{"get", "list", "create"}, map[string]any{"adminProjects": []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	return apiKeys{contracts: ck, share: sk}
}
