// Command keygate-bench is `make bench`: it starts the real bin/caddy,
// loads it from this second process on loopback, and prints each figure
// as a ratio against a baseline measured in the same run (absolute times
// on a shared 2-core machine are not stable; ratios are). -backend
// postgres (`make bench BACKEND=postgres`) runs the gateway on a
// PostgreSQL started for the run on the same machine.
//
// With -soak DURATION it is `make soak` instead (soak.go): a mixed load
// for that long while the gateway's RSS, goroutines and open files are
// sampled; it exits 1 when the soak fails.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var (
	caddyBin = flag.String("caddy", "./bin/caddy", "the keygate build to measure")
	runFor   = flag.Duration("duration", 3*time.Second, "length of one throughput run")
	rounds   = flag.Int("rounds", 3, "interleaved rounds of each throughput comparison")
	// The key check's figures differ by a few per cent: a median of many
	// short rounds holds still where one of three long ones moves by
	// that much on a shared machine.
	authRounds = flag.Int("auth-rounds", 30, "interleaved rounds of the key check's figures (overhead, limits, scopes, the large store's key lookup), each of -auth-duration")
	authFor    = flag.Duration("auth-duration", time.Second, "length of one run of the key check's figures")
	mailTo     = flag.String("mail", "smtp", "where the gateway's mail goes: smtp (a server on loopback, as production sends to its relay) or drop (the data directory's mail drop, the development default)")
	clients    = flag.Int("clients", 32, "concurrent connections of a throughput run")
	large      = flag.Int("n", 100000, "keys, contracts and shares in the large store")
	keep       = flag.Bool("keep", false, "keep the data directories")
	profile    = flag.String("profile", "", "write a CPU profile of the gateway during the first run named by -profile-of to this file")
	profileOf  = flag.String("profile-of", "auth", "the run to profile: bare, bare-no-key, auth, auth-limited, auth-scopes, contract-get, share-get, share-page, share-page-host, contract-create, flood-limited, flood-unknown, flood-refused")
	backendOf  = flag.String("backend", "bolt", "the storage backend: bolt, or postgres (a throwaway durable PostgreSQL started for the run)")
	instances  = flag.Int("instances", 1, "with -backend postgres and more than 1: only compare that many gateways on one database with one")
	figures    = flag.String("figures", "all", "comma-separated figures to measure, for a shorter run: overhead, contract-get, share-get, host, seal, creates, limits, scopes, import, neighbour, rotation, large; with -instances: spread, accuracy")
)

// want says whether -figures asks for figure name.
func want(name string) bool {
	for _, f := range strings.Split(*figures, ",") {
		if f = strings.TrimSpace(f); f == "all" || f == name {
			return true
		}
	}
	return false
}

func main() {
	flag.Parse()
	log.SetOutput(os.Stderr) // importing caddymodule sent it to Caddy's logger
	log.SetFlags(0)
	log.SetPrefix("bench: ")
	tmp, err := os.MkdirTemp("", "keygate-bench-")
	if err != nil {
		log.Fatal(err)
	}
	if *soakFor > 0 {
		if *backendOf != "bolt" {
			log.Fatal("the soak runs on bolt only")
		}
		failed := runSoak(*caddyBin, tmp)
		if !failed && !*keep {
			os.RemoveAll(tmp)
		}
		if failed {
			os.Exit(1)
		}
		return
	}
	if !*keep {
		defer os.RemoveAll(tmp)
	}
	be, err := newBackend(*backendOf)
	if err != nil {
		log.Fatal(err)
	}
	defer be.close()
	stopBackend = be.close
	goal := be.goals

	smallStore, err := be.store(filepath.Join(tmp, "small"), "small")
	if err != nil {
		fatalf("%v", err)
	}
	largeStore, err := be.store(filepath.Join(tmp, "large"), "large")
	if err != nil {
		fatalf("%v", err)
	}
	log.Printf("preparing a store with 1 key per service")
	small, err := prepare(smallStore, 1, 1, 1)
	if err != nil {
		fatalf("%v", err)
	}
	if *instances > 1 {
		fmt.Printf("keygate benchmark: %d interleaved rounds of %s\nstorage backend: %s\n\n", *rounds, *runFor, be.describe())
		runInstances(*caddyBin, smallStore, small, *instances)
		return
	}
	if *against != "" {
		fmt.Printf("keygate benchmark: %d clients, %d interleaved rounds of %s\nstorage backend: %s\n\n", *clients, *rounds, *runFor, be.describe())
		runAgainst(be, tmp, smallStore, small)
		return
	}
	var big *dataset
	if want("large") {
		log.Printf("preparing a store with %d keys, %d contracts and %d shares (takes a while)", *large, *large, *large)
		if big, err = prepare(largeStore, *large, *large, *large); err != nil {
			fatalf("%v", err)
		}
	}

	fmt.Printf("keygate benchmark: %d clients, %d interleaved rounds of %s, %d in the large store\n", *clients, *rounds, *runFor, *large)
	fmt.Printf("storage backend: %s\n", be.describe())
	switch *mailTo {
	case "smtp", "drop":
	default:
		fatalf("-mail %q: smtp or drop", *mailTo)
	}
	if *mailTo == "smtp" {
		if benchMail, err = startMailSink(); err != nil {
			fatalf("mail sink: %v", err)
		}
		defer benchMail.close()
		fmt.Printf("mail: SMTP to a server on loopback, as in production (-mail drop: the development mail drop)\n\n")
	} else {
		fmt.Printf("mail: the development mail drop, a file and an fsync a message\n\n")
	}

	gw, err := startGateway(*caddyBin, smallStore)
	if err != nil {
		fatalf("%v", err)
	}
	var authSmall float64
	if want("overhead") || want("large") {
		fmt.Printf("overhead: %d interleaved rounds of %s of a bare respond sent no header, the same sent the Authorization header, and webapi_auth + respond\n", *authRounds, *authFor)
		runs := gw.interleave(*authRounds, *authFor, gw.bareNoKey(), gw.bare(small), gw.authRespond(small))
		overhead := summarize("bare respond, no header (a)", runs[0], "webapi_auth contracts + respond (b)", runs[2])
		fmt.Printf("gateway overhead:        b/a = %.3f   (goal >= %.2f)\n", overhead, goal.overhead)
		authSmall = summarize("bare respond, Authorization (a)", runs[1], "webapi_auth contracts + respond (b)", runs[2])
		fmt.Printf("the same, against a bare respond sent the same request: b/a = %.3f (what webapi_auth itself adds)\n", authSmall)
		header := summarize("bare respond, no header (a)", runs[0], "bare respond, Authorization (b)", runs[1])
		fmt.Printf("the Authorization header alone, to bare respond: b/a = %.3f (what Caddy and Go spend on it before webapi_auth)\n", header)
	}
	if want("limits") {
		r := gw.limitedAuth(small)
		fmt.Printf("auth with two rate-limit policies and a quota: b/a = %.3f   (goal >= %.2f)\n", r, goal.limitedAuth)
	}
	if want("scopes") {
		r := gw.scopedAuth(small)
		fmt.Printf("auth with its own, a plan's and a consumer's policy + the consumer's quota: b/a = %.3f   (goal >= %.2f)\n", r, goal.scopes)
	}
	if want("host") {
		hostFigure(be, tmp)
	}
	if want("seal") {
		sealFigure(be, tmp)
	}
	if want("contract-get") {
		getContract := gw.compare("bare respond", gw.bare(small), "GET /webapi/contracts/{id}", gw.getContract(small))
		fmt.Printf("contract get:            ratio = %.3f   (goal >= %.2f)\n", getContract, goal.contractGet)
	}
	if want("share-get") {
		getShare := gw.compare("bare respond", gw.bare(small), "GET /webapi/share/{uuid}", gw.getShare(small))
		fmt.Printf("share get:               ratio = %.3f   (%s)\n", getShare, goal.atLeast(goal.shareGet))
	}
	if want("creates") {
		creates := gw.creates(small, 64)
		fmt.Printf("contract creates:        %.0f/s with 64 clients, each reply durable   (goal >= %.0f/s)\n", creates, goal.creates)
		keyed := gw.createsOf(gw.createContractKeyed(small), 64)
		fmt.Printf("  with an Idempotency-Key: %.0f/s (each key new: every request creates and stores its reply)\n", keyed)
	}
	if want("import") {
		rate, err := gw.importRate(*rounds)
		if err != nil {
			fatalf("%v", err)
		}
		fmt.Printf("key import, %d keys with their tokens in one request: %.0f keys/s   (goal >= 1000/s)\n", importCount, rate)
	}
	if want("neighbour") {
		fmt.Printf("noisy neighbour: key A (%d/s) floods POST /webapi/contracts from %d connections, key B reads GET /webapi/contracts/{id} from %d\n",
			floodLimit, floodClients, neighbourClients)
		perSec, r, refusal := gw.neighbour(small)
		fmt.Printf("  flood's creates let through: %.1f/s   (goal <= %d/s, the limit: as many invitation mails)\n", perSec, floodLimit)
		fmt.Printf("  B beside the limited flood / beside the same flood with an unknown key (401): ratio = %.3f   (goal >= %.2f)\n", r, goal.neighbour)
		fmt.Printf("  B beside a flood all refused 429 / beside the unknown-key flood (401): ratio = %.3f   (a rate-limit refusal against a bad-key refusal)\n", refusal)
	}
	fmt.Println()
	gw.stop()
	if want("rotation") {
		runRotation(*caddyBin, tmp, be)
		fmt.Println()
	}

	if !want("large") {
		return
	}
	gw, err = startGateway(*caddyBin, largeStore)
	if err != nil {
		fatalf("%v", err)
	}
	authLarge := gw.compareFor(*authRounds, *authFor, "bare respond (a)", gw.bare(big), fmt.Sprintf("webapi_auth + respond, %d keys (b)", *large), gw.authRespond(big))
	fmt.Printf("key lookup vs store size: (b/a with %d keys) / (b/a with 1 key) = %.3f   (goal >= %.2f)\n", *large, authLarge/authSmall, goal.keyLookup)
	p50, p99 := gw.latency(gw.searchByTemplateCreator(big), 2000)
	fmt.Printf("contract search, template+creator, creation-date-desc: p50 %s  p99 %s   (goal p99 <= %s)\n", p50, p99, goal.search)
	p50, p99 = gw.latency(gw.searchSubstring(big), 200)
	fmt.Printf("contract search, substring over all %d:            p50 %s  p99 %s   (goal p99 <= %s)\n", *large, p50, p99, goal.substring)
	p50, p99 = gw.latency(gw.listShares(big), 2000)
	fmt.Printf("share list, projectId, created_at desc, limit 100:    p50 %s  p99 %s   (goal p99 <= %s)\n", p50, p99, goal.shareList)
	gw.stop()
}

// compare runs base and subject in interleaved rounds and returns the
// median of the per-round ratios subject/base. It prints the gateway's
// CPU time per request of each too, and their ratio base/subject: on a
// machine that others load, throughput swings with their work, while
// what a request costs the gateway moves much less.
func (g *gatewayProc) compare(baseName string, base loadSpec, subjName string, subject loadSpec) float64 {
	return g.compareFor(*rounds, *runFor, baseName, base, subjName, subject)
}

// maxRoundLines is the most rounds of a comparison printed one by one;
// more are summed up in one line.
const maxRoundLines = 10

// compareFor is compare with n rounds of d each.
func (g *gatewayProc) compareFor(n int, d time.Duration, baseName string, base loadSpec, subjName string, subject loadSpec) float64 {
	runs := g.interleave(n, d, base, subject)
	return summarize(baseName, runs[0], subjName, runs[1])
}

// interleave runs specs one after the other, n rounds of d each, and
// returns each spec's results by round: a change of the machine's load
// then falls on every spec alike.
func (g *gatewayProc) interleave(n int, d time.Duration, specs ...loadSpec) [][]result {
	runs := make([][]result, len(specs))
	for i := 0; i < n; i++ {
		for k, spec := range specs {
			runs[k] = append(runs[k], g.runFor(spec, d))
		}
	}
	return runs
}

// summarize prints the rounds of subject against base and returns the
// median of their throughput ratios.
func summarize(baseName string, base []result, subjName string, subject []result) float64 {
	n := len(base)
	var ratios, cpuRatios []float64
	var cpuA, cpuB []float64
	for i := range base {
		a, b := base[i], subject[i]
		r := b.rps() / a.rps()
		ratios = append(ratios, r)
		ca, cb := a.cpuPerRequest(), b.cpuPerRequest()
		cpuA, cpuB = append(cpuA, ca), append(cpuB, cb)
		cpuRatios = append(cpuRatios, ca/cb)
		if n <= maxRoundLines {
			fmt.Printf("  round %d: %-34s %8.0f req/s %5.1f µs   %-38s %8.0f req/s %5.1f µs   ratio %.3f\n", i+1, baseName, a.rps(), ca, subjName, b.rps(), cb, r)
		}
	}
	m := median(ratios) // sorts ratios
	if n > maxRoundLines {
		fmt.Printf("  %s against %s: ratios of %d rounds from %.3f to %.3f, middle half %.3f to %.3f\n",
			subjName, baseName, n, ratios[0], ratios[n-1], ratios[n/4], ratios[(3*n)/4])
	}
	fmt.Printf("  gateway CPU per request (medians): %.1f µs and %.1f µs, first/second = %.3f\n", median(cpuA), median(cpuB), median(cpuRatios))
	return m
}

func (g *gatewayProc) latency(spec loadSpec, n int) (p50, p99 time.Duration) {
	c, err := dial(spec.addr)
	if err != nil {
		fatalf("%v", err)
	}
	defer c.c.Close()
	// Warm up caches the way a running gateway has them.
	for i := 0; i < 50; i++ {
		c.do(spec.next(0, i))
	}
	lat := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		req := spec.next(0, i)
		t0 := time.Now()
		status, err := c.do(req)
		if err != nil || status != req.expect {
			fatalf("latency run: status %d, %v", status, err)
		}
		lat = append(lat, time.Since(t0))
	}
	return percentile(lat, 50).Round(10 * time.Microsecond), percentile(lat, 99).Round(10 * time.Microsecond)
}

func (g *gatewayProc) run(spec loadSpec) result { return g.runFor(spec, *runFor) }

func (g *gatewayProc) runFor(spec loadSpec, d time.Duration) result {
	if *profile != "" && spec.name == *profileOf {
		done := g.captureProfile(*profile, d)
		defer func() { <-done; *profile = "" }()
	}
	cpu0 := g.cpuTime()
	res, err := load(spec.addr, *clients, d, false, spec.next)
	res.cpu = g.cpuTime() - cpu0
	if err != nil {
		fatalf("load on %s: %v", spec.addr, err)
	}
	if res.failures > 0 {
		fatalf("load on %s: %d unexpected statuses", spec.addr, res.failures)
	}
	return res
}

func (g *gatewayProc) creates(d *dataset, n int) float64 {
	return g.createsOf(g.createContract(d), n)
}

// createsOf runs spec, a create, with n clients and returns its rate.
func (g *gatewayProc) createsOf(spec loadSpec, n int) float64 {
	if *profile != "" && spec.name == *profileOf {
		done := g.captureProfile(*profile, *runFor)
		defer func() { <-done; *profile = "" }()
	}
	res, err := load(spec.addr, n, *runFor, false, spec.next)
	if err != nil {
		fatalf("creates: %v", err)
	}
	if res.failures > 0 {
		fatalf("creates: %d unexpected statuses", res.failures)
	}
	return res.rps()
}
