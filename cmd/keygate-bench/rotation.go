package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/keygate/keygate/internal/testkit/gatewayproc"
)

// The rotation figure: the p99 latency of the 1 s windows in which the
// audit log rolls (and the two after: compressing takes a while), against
// the windows in which it does not, under a steady keyed load on a
// gateway held to one core (GOMAXPROCS=1). The audit log rolls every
// 8 MiB, about every 10 s here; with the shipped defaults
// (roll_uncompressed) a roll is a rename, while Caddy's default gzips the
// rolled file inside the gateway's process, on the core that serves.

const (
	rotationRate    = 2000 // requests per second, each audited
	rotationConns   = 8
	rotationFor     = 40 * time.Second
	rotationWindow  = time.Second
	rotationSizeOpt = "roll_size 8MiB\n\t\t\troll_keep 4"
)

// rotationResult is one configuration's latencies, by kind of window.
type rotationResult struct {
	rolls             int
	withRoll, without time.Duration // p99
	nWith, nWithout   int
}

// rotation measures one gateway whose audit writer has the options roll.
func rotation(bin string, st store, roll string) (rotationResult, error) {
	d, err := prepare(st, 1, 1, 1)
	if err != nil {
		return rotationResult{}, err
	}
	g, err := gatewayproc.Start(gatewayproc.Options{
		Bin: bin, Dir: st.dir, Site: benchSite, ExtraSites: benchExtraSites,
		AuditOutput: "buffered_file", LogLevel: "WARN", WebAPI: st.webapi,
		AuditRoll: roll, Env: []string{"GOMAXPROCS=1"},
	})
	if err != nil {
		return rotationResult{}, err
	}
	defer g.Stop()
	authAddr := strings.TrimPrefix(g.Extra[1], "http://")
	req := newRequest("GET", authAddr, "/webapi/contracts/00000000-0000-4000-8000-000000000000", auth(d.contractsToken), nil, 200)

	// The rolls, as the times their files appear in the directory.
	var mu sync.Mutex
	var rolls []time.Time
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		seen := map[string]bool{}
		for {
			entries, _ := os.ReadDir(st.dir)
			now := time.Now()
			for _, e := range entries {
				n := e.Name()
				if strings.HasPrefix(n, "audit-") && !seen[strings.TrimSuffix(n, ".gz")] {
					seen[strings.TrimSuffix(n, ".gz")] = true
					mu.Lock()
					rolls = append(rolls, now)
					mu.Unlock()
				}
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()

	// A steady load: each connection sends at its share of the rate,
	// on a schedule, and times each answer from its scheduled start.
	type sample struct {
		at  time.Time
		lat time.Duration
	}
	var all []sample
	var wg sync.WaitGroup
	start := time.Now()
	errs := make(chan error, rotationConns)
	for i := range rotationConns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := dial(authAddr)
			if err != nil {
				errs <- err
				return
			}
			defer c.c.Close()
			every := time.Duration(rotationConns) * time.Second / rotationRate
			next := start.Add(time.Duration(i) * every / rotationConns)
			var mine []sample
			for next.Before(start.Add(rotationFor)) {
				time.Sleep(time.Until(next))
				status, err := c.do(req)
				if err != nil || status != 200 {
					errs <- fmt.Errorf("rotation load: %d %v", status, err)
					return
				}
				mine = append(mine, sample{at: next, lat: time.Since(next)})
				next = next.Add(every)
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	select {
	case err := <-errs:
		return rotationResult{}, err
	default:
	}

	// A window holds a roll if a rolled file appeared in it or in the
	// two windows before (compression follows the rename).
	rolled := map[int]bool{}
	for _, t := range rolls {
		w := int(t.Sub(start) / rotationWindow)
		rolled[w], rolled[w+1], rolled[w+2] = true, true, true
	}
	var with, without []time.Duration
	for _, s := range all {
		if rolled[int(s.at.Sub(start)/rotationWindow)] {
			with = append(with, s.lat)
		} else {
			without = append(without, s.lat)
		}
	}
	if len(with) == 0 || len(without) == 0 {
		return rotationResult{}, fmt.Errorf("rotation: %d rolls in %s: no windows to compare", len(rolls), rotationFor)
	}
	return rotationResult{rolls: len(rolls), withRoll: percentile(with, 99), without: percentile(without, 99), nWith: len(with), nWithout: len(without)}, nil
}

// runRotation prints the figure for the shipped defaults and, for
// comparison, for Caddy's default of compressing rolled files.
func runRotation(bin, tmp string, be *backend) {
	for _, c := range []struct{ name, roll string }{
		{"shipped (roll_uncompressed)", rotationSizeOpt + "\n\t\t\troll_uncompressed"},
		{"Caddy's default (gzip in the process)", rotationSizeOpt},
	} {
		st, err := be.store(filepath.Join(tmp, "rotation-"+strings.Fields(c.name)[0]), "rotation")
		if err != nil {
			fatalf("%v", err)
		}
		r, err := rotation(bin, st, c.roll)
		if err != nil {
			fatalf("%v", err)
		}
		goal := ""
		if strings.HasPrefix(c.name, "shipped") {
			goal = "   (goal <= 1.50)"
		}
		fmt.Printf("audit log rotation, %s: %d rolls; p99 %s in windows with a roll (%d requests), %s without (%d): ratio = %.2f%s\n",
			c.name, r.rolls, r.withRoll.Round(10*time.Microsecond), r.nWith, r.without.Round(10*time.Microsecond), r.nWithout,
			float64(r.withRoll)/float64(r.without), goal)
	}
}
