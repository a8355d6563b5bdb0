package caddymodule_test

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keygate/keygate/internal/testkit/testwait"
)

func TestMetricsSurviveReload(t *testing.T) {
	g := startGateway(t, bolt, echoSite)
	k := createKey(t, map[string]any{"service": "contracts", "name": "m", "owner": "alice", "privileges": []string{"get"}})
	do(t, "GET", siteURL+"/webapi/contracts/x", nil, bearer(k.Token)...)
	do(t, "GET", siteURL+"/webapi/contracts/x", nil)

	want := []string{
		`keygate_requests_total{code="200",operation="get",service="contracts"}`,
		`keygate_requests_total{code="401",operation="none",service="contracts"}`,
		`keygate_request_duration_seconds_bucket{operation="get",service="contracts"`,
		`keygate_auth_refusals_total{reason="missing_key",service="contracts"}`,
		`keygate_keys{service="contracts"}`,
		`keygate_usage_flush_seconds_count`,
		`keygate_notifications_total{channel="sms",outcome="failed"} 0`,
	}
	check := func(stage string) string {
		var body string
		missing := ""
		testwait.For(t, testwait.Generous, stage+" metrics", func() bool {
			r := do(t, "GET", adminURL+"/metrics", nil)
			body = string(r.body)
			for _, w := range want {
				if !strings.Contains(body, w) {
					missing = w
					t.Logf("%s: waiting for %s", stage, missing)
					return false
				}
			}
			return r.status == 200
		})
		if strings.Contains(body, k.Token) || strings.Contains(body, k.ID) || strings.Contains(body, "alice") {
			t.Fatalf("%s: metrics carry a token, key id or owner", stage)
		}
		return body
	}
	check("before reload")
	g.load(echoSite + "\n# reloaded\n")
	do(t, "GET", siteURL+"/webapi/contracts/x", nil, bearer(k.Token)...)
	check("after reload")
	if r := do(t, "GET", siteURL+"/webapi/contracts/x", nil, bearer(k.Token)...); r.status != 200 {
		t.Fatalf("key after reload: %d", r.status)
	}
}

// TestReloadUnderLoad reloads the config while clients call the API: no
// request fails, none hangs, and the usage of every call is counted.
func TestReloadUnderLoad(t *testing.T) {
	g := startGateway(t, bolt, echoSite)
	k := createKey(t, map[string]any{"service": "contracts", "name": "load", "owner": "alice", "privileges": []string{"get"}})

	var ok, failed atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 5000; n++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", siteURL+"/webapi/contracts/x", nil)
				req.Header.Set("Authorization", "Bearer "+k.Token)
				resp, err := client.Do(req)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					if err == nil {
						resp.Body.Close()
					}
					continue
				}
				resp.Body.Close()
				ok.Add(1)
			}
		}()
	}
	for i := 0; i < 3; i++ {
		time.Sleep(100 * time.Millisecond)
		g.load(echoSite + strings.Repeat("\n", i+1))
	}
	time.Sleep(100 * time.Millisecond)
	close(stop)
	wg.Wait()
	if failed.Load() != 0 || ok.Load() == 0 {
		t.Fatalf("%d requests failed, %d succeeded across reloads", failed.Load(), ok.Load())
	}
	testwait.For(t, testwait.Generous, "usage of every call", func() bool {
		r := do(t, "GET", adminURL+"/webapi/keys/"+k.ID, nil)
		var got struct{ UsageCount int64 }
		r.json(t, &got)
		return got.UsageCount == ok.Load()
	})
}

// TestUsagePersists proves counts reach the database: after the state is
// released (another database loaded) and taken up again, they are back.
func TestUsagePersists(t *testing.T) { eachBackend(t, testUsagePersists) }

func testUsagePersists(t *testing.T, b backend) {
	g := startGateway(t, b, echoSite)
	k := createKey(t, map[string]any{"service": "contracts", "name": "p", "owner": "alice", "privileges": []string{"get"}})
	for i := 0; i < 5; i++ {
		do(t, "GET", siteURL+"/webapi/contracts/x", nil, bearer(k.Token)...)
	}
	first, firstStorage := g.dir, g.storage
	g.dir, g.storage = t.TempDir(), b.storage(t)
	g.load(echoSite)
	if r := do(t, "GET", siteURL+"/webapi/contracts/x", nil, bearer(k.Token)...); r.status != 401 {
		t.Fatalf("key of another database: %d", r.status)
	}
	g.dir, g.storage = first, firstStorage
	g.load(echoSite)
	r := do(t, "GET", adminURL+"/webapi/keys/"+k.ID, nil)
	if !strings.Contains(string(r.body), `"usageCount": 5`) || strings.Contains(string(r.body), `"lastUsageTime": null`) {
		t.Fatalf("usage after reopening: %s", r.body)
	}
}
