package main

import (
	"fmt"
	"log"
	"path/filepath"
	"sort"
	"sync"
)

// runInstances is `make bench BACKEND=postgres INSTANCES=n`: n gateways
// on one database (the small data set's schema, one master key), and the
// same load once on the first alone and once spread over all of them, in
// interleaved rounds. On a 2-core machine that also runs the database the
// point is what a second instance costs, not that it doubles throughput.
func runInstances(bin string, st store, d *dataset, n int) {
	if st.webapi == "" {
		fatalf("-instances needs -backend postgres: instances share a database")
	}
	gws := make([]*gatewayProc, 0, n)
	defer func() {
		for _, g := range gws {
			if err := g.Stop(); err != nil {
				log.Print(err)
			}
		}
		running = nil
	}()
	for i := 0; i < n; i++ {
		own := st
		if i > 0 {
			own.dir = fmt.Sprintf("%s-%d", st.dir, i+1)
			own.webapi += "\n\t\tmaster_key_file " + filepath.Join(st.dir, "master.key")
		}
		g, err := startGateway(bin, own)
		if err != nil {
			fatalf("instance %d: %v", i+1, err)
		}
		gws = append(gws, g)
	}
	if want("spread") {
		fmt.Printf("%d instances on one database, the load spread evenly, against the first alone\n", n)
		creates := spread(gws, 64, func(g *gatewayProc) loadSpec { return g.createContract(d) }, "contract creates, 64 clients")
		gets := spread(gws, *clients, func(g *gatewayProc) loadSpec { return g.getContract(d) }, fmt.Sprintf("GET /webapi/contracts/{id}, %d clients", *clients))
		fmt.Printf("contract creates:        %d instances / 1 = %.3f\n", n, creates)
		fmt.Printf("contract get:            %d instances / 1 = %.3f\n\n", n, gets)
	}
	if want("accuracy") {
		accuracy(gws)
	}
}

// spread runs spec with clients connections on the first gateway alone,
// then with the connections split over all, in interleaved rounds, and
// returns the median ratio of their throughputs (all / first alone).
func spread(gws []*gatewayProc, clients int, spec func(*gatewayProc) loadSpec, name string) float64 {
	var ratios []float64
	for round := 1; round <= *rounds; round++ {
		alone := runLoad(spec(gws[0]), clients)
		var mu sync.Mutex
		var wg sync.WaitGroup
		total := 0.0
		for i, g := range gws {
			share := clients / len(gws)
			if i < clients%len(gws) {
				share++
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rps := runLoad(spec(g), share)
				mu.Lock()
				total += rps
				mu.Unlock()
			}()
		}
		wg.Wait()
		ratios = append(ratios, total/alone)
		fmt.Printf("  round %d: %-40s 1 instance %8.0f/s   %d instances %8.0f/s   ratio %.3f\n", round, name, alone, len(gws), total, total/alone)
	}
	sort.Float64s(ratios)
	return ratios[len(ratios)/2]
}

// runLoad runs spec with clients connections for the run's duration and
// returns its throughput; any unexpected status ends the bench.
func runLoad(spec loadSpec, clients int) float64 {
	res, err := load(spec.addr, clients, *runFor, false, spec.next)
	if err != nil {
		fatalf("load on %s: %v", spec.addr, err)
	}
	if res.failures > 0 {
		fatalf("load on %s: %d unexpected statuses", spec.addr, res.failures)
	}
	return res.rps()
}
