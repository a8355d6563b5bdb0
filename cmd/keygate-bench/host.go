package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// The issue tracker figure: the share page of an issue read from the
// tracker (a tracker of the bench's own on loopback, answering from
// memory, so that only keygate's work is measured) against the same page
// without a tracker, with the cache warm; and, with the cache off, the
// page's time over the tracker's own answer time.

// benchIssue and benchProject are what the bench's tracker answers, as
// Redmine's REST API does.
const (
	benchIssue = `{"issue":{"id":42,"project":{"id":3,"name":"ACME"},"tracker":{"id":1,"name":"Bug"},
"status":{"id":2,"name":"In Progress"},"priority":{"id":4,"name":"Normal"},"author":{"id":5,"name":"Ann Author"},
"subject":"Printer jams","description":"It **jams** on page 2.\n\n- after 10 pages\n- with duplex on","is_private":false,
"created_on":"2026-11-01T08:00:00Z","updated_on":"2026-11-20T09:30:00Z",
"journals":[{"id":10,"user":{"id":6,"name":"Sam Support"},"notes":"We ordered a part.","created_on":"2026-11-02T10:00:00Z","private_notes":false}],
"attachments":[{"id":9,"filename":"photo.jpg","filesize":2048,"content_type":"image/jpeg","created_on":"2026-11-02T10:00:00Z"}]}}`
	benchProject = `{"project":{"id":3,"name":"ACME","identifier":"acme"}}`
	benchAPIKey  = "bench-tracker-api-key-0123456789abcdef0123"
)

// benchTracker serves the bench's tracker on a free loopback port.
func benchTracker() (url string, stop func()) {
	mux := http.NewServeMux()
	answer := func(body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Redmine-API-Key") != benchAPIKey {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(body))
		}
	}
	mux.HandleFunc("GET /issues/42.json", answer(benchIssue))
	mux.HandleFunc("GET /projects/3.json", answer(benchProject))
	mux.HandleFunc("GET /projects/acme.json", answer(benchProject))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fatalf("tracker: %v", err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }
}

// hostFigure runs the tracker figure on three gateways of their own
// stores: without a tracker, with one and a warm cache, with one and no
// cache.
func hostFigure(be *backend, tmp string) {
	trackerURL, stopTracker := benchTracker()
	defer stopTracker()
	keyFile := filepath.Join(tmp, "tracker-api-key")
	if err := os.WriteFile(keyFile, []byte(benchAPIKey), 0o600); err != nil {
		fatalf("%v", err)
	}
	hostBlock := func(cache string) string {
		return fmt.Sprintf("\n\t\thost redmine {\n\t\t\turl %s\n\t\t\tapi_key_file %s\n\t\t\tcache %s\n\t\t}", trackerURL, keyFile, cache)
	}
	start := func(name, extra string) (*gatewayProc, loadSpec) {
		st, err := be.store(filepath.Join(tmp, name), name)
		if err != nil {
			fatalf("%v", err)
		}
		st.webapi += extra
		g, err := startGateway(*caddyBin, st)
		if err != nil {
			fatalf("%v", err)
		}
		running = nil // several run at once; each is stopped below
		return g, g.sharePage(g.shareOfIssue())
	}
	plain, plainPage := start("host-none", "")
	defer plain.stop()
	warm, warmPage := start("host-warm", hostBlock("30s"))
	warmPage.name = "share-page-host"
	defer warm.stop()
	cold, coldPage := start("host-cold", hostBlock("0s"))
	defer cold.stop()

	fmt.Printf("issue tracker: GET /s/{uuid} of an ISSUE share, %d clients, %d rounds\n", *clients, *rounds)
	var ratios []float64
	for i := 0; i < *rounds; i++ {
		a := plain.run(plainPage)
		b := warm.run(warmPage)
		r := b.rps() / a.rps()
		ratios = append(ratios, r)
		fmt.Printf("  round %d: without a tracker %8.0f req/s   with one, cache warm %8.0f req/s   ratio %.3f\n", i+1, a.rps(), b.rps(), r)
	}
	fmt.Printf("share page with a tracker, cache warm / without: %.3f   (goal >= 0.80)\n", median(ratios))

	const n = 2000
	p50, p99 := cold.latency(coldPage, n)
	own50, own99 := trackerLatency(trackerURL, n)
	fmt.Printf("share page with the cache off: p50 %s, p99 %s; the tracker's own answers (issue and project): p50 %s, p99 %s\n", p50, p99, own50, own99)
	fmt.Printf("the page's time over the tracker's, p50: %s   (goal <= 5ms)\n", (p50 - own50).Round(10*time.Microsecond))
}

// shareOfIssue creates a share key and an ISSUE share of the bench
// tracker's issue 42 with its subject, description and comments shown,
// and returns the share's uuid.
func (g *gatewayProc) shareOfIssue() string {
	k, err := g.CreateKey("share", "bench-host", "bench", []string{"create", "get"}, nil)
	if err != nil {
		fatalf("share key: %v", err)
	}
	body, _ := json.Marshal(map[string]any{"type": "ISSUE", "issueId": "42", "projectId": "acme",
		"fieldsConfig": map[string]any{"fieldConfigs": map[string]any{
			"summary":     map[string]any{"fieldPermissions": []string{"VIEW"}},
			"description": map[string]any{"fieldPermissions": []string{"VIEW", "VIEW_CONTENT"}},
			"status":      map[string]any{"fieldPermissions": []string{"VIEW"}},
			"comment":     map[string]any{"fieldPermissions": []string{"VIEW"}},
			"attachment":  map[string]any{"fieldPermissions": []string{"VIEW"}},
		}}})
	req, _ := http.NewRequest("POST", g.Site+"/webapi/share", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+k.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fatalf("share: %v", err)
	}
	defer resp.Body.Close()
	var sh struct{ UUID string }
	if resp.StatusCode != http.StatusCreated || json.NewDecoder(resp.Body).Decode(&sh) != nil {
		fatalf("share: %d", resp.StatusCode)
	}
	return sh.UUID
}

// sharePage is GET /s/{uuid} as a browser asks for it.
func (g *gatewayProc) sharePage(uuid string) loadSpec {
	req := newRequest("GET", g.apiAddr, "/s/"+uuid, http.Header{"Accept": {"text/html"}}, nil, 200)
	return loadSpec{name: "share-page", addr: g.apiAddr, next: func(int, int) request { return req }}
}

// trackerLatency is the p50 and p99 of the two answers an issue takes
// from the bench's tracker, asked one after the other on one connection.
func trackerLatency(base string, n int) (p50, p99 time.Duration) {
	c := &http.Client{}
	get := func(path string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("X-Redmine-API-Key", benchAPIKey)
		resp, err := c.Do(req)
		if err != nil {
			fatalf("tracker: %v", err)
		}
		var v any
		json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
	}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n+50; i++ {
		t0 := time.Now()
		get("/issues/42.json")
		get("/projects/3.json")
		if i >= 50 {
			lat = append(lat, time.Since(t0))
		}
	}
	return percentile(lat, 50).Round(10 * time.Microsecond), percentile(lat, 99).Round(10 * time.Microsecond)
}
