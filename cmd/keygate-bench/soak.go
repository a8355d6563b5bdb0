package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"log"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keygate/keygate/caddymodule"
	"github.com/keygate/keygate/internal/testkit/gatewayproc"
)

// The soak (`make soak`, `-soak DURATION`): the real binary under a mixed
// load from a bounded number of clients for a long while, sampled every
// -soak-sample. It fails on any 5xx or transport error, on any status the
// mix does not expect, on a goroutine or fd count that keeps growing, on
// RSS growing more than 20 % after warm-up, and when goroutines or fds do
// not come back to their level before the load once it stops.
//
// The mix, per client, is a loop of flows picked at random by weight:
//
//	contracts  create, get, archive, search (template+creator, statuses,
//	           substring), get a prepared one, delete the oldest of its own
//	           beyond 8 and then get it (404)
//	shares     create, get, update, list by project, activity, the public
//	           page of a passwordless share, delete the oldest beyond 8
//	refusals   three of: no key, unknown token, a key not yet valid, the
//	           other service's key (401); a key without the privilege
//	           (403); an unknown contract, signing link or share (404)
//	pages      a password-protected share: its page (the form), JSON
//	           (401), a wrong password (401), the right one (303 and the
//	           cookie), the page and JSON with the cookie (200); in one
//	           flow of five, wrong passwords until the limiter answers 429
//	           (expected: 5 at once, then one every 12 s per share and
//	           client); its activity; delete
//	signing    a contract with a url signer (no password) and an e-mail
//	           signer (password by e-mail) and a watcher: both pages (JSON,
//	           one HTML), the url signer draws a signature, the e-mail
//	           signer asks for a password, asks again at once (429, the
//	           60 s resend rule), in one flow of four tries a wrong one
//	           (400), reads the right one from the mail sink and signs (or,
//	           one flow in five, rejects); the contract is then signed with
//	           its PDFs (one downloaded) or rejected; delete
//
// Every flow deletes what it creates (beyond a few kept per client), so
// the store, and with it the mapped database, stays about the same size
// after warm-up: growth in RSS is then the process's, not the data's.

var (
	soakFor     = flag.Duration("soak", 0, "run the soak for this long instead of the benchmark (make soak)")
	soakClients = flag.Int("soak-clients", 16, "concurrent clients of the soak")
	soakSample  = flag.Duration("soak-sample", 15*time.Second, "sampling interval of the soak")
	soakStore   = flag.Int("soak-store", 5000, "keys, contracts and shares prepared for the soak")
)

// Thresholds of the soak's verdict.
const (
	// RSS growth: the mean RSS of the last minute against the mean of the
	// first minute after warm-up (a quarter of what follows warm-up, when
	// that is shorter). Means, not single samples: a Go heap breathes with
	// its garbage collections (a share password's Argon2id alone takes
	// 19 MiB), so one sample can sit 10-20 % above the next with nothing
	// leaking.
	rssGrowthLimit = 0.20
	rssWindow      = time.Minute
	warmupShare    = 0.20 // warm-up is this share of the duration, at most 2 minutes
	maxWarmup      = 2 * time.Minute
	// A count is "growing" when, over the samples after warm-up, the
	// least-squares slope projected over that window exceeds margin AND
	// the mean of the last third exceeds the mean of the first third by
	// more than half the margin. margin = max(abs, rel × first-third
	// mean). Under steady load the counts wander with what is in flight
	// (each connection and each running handler is a goroutine, each
	// connection an fd), by up to about twice the client count; a leak
	// is a trend that survives both tests, and a leak per request or per
	// flow grows by thousands in minutes, far past these margins.
	goroutineMarginAbs = 40
	fdMarginAbs        = 20
	countMarginRel     = 0.10
	minTrendSamples    = 6
	// After the load, with the client's connections closed, goroutines
	// and fds must come back within these of their level before the load.
	idleGoroutineSlack = 25
	idleFDSlack        = 10
	idleWait           = 30 * time.Second
)

// soak is one run.
type soak struct {
	g    *gatewayproc.Gateway
	site string // base URL
	hc   *http.Client
	mail *mailSink
	d    *dataset

	contractsGetOnly, shareGetOnly, notYetValid string

	deadline time.Time
	stats    soakStats
	flows    [nFlows]atomic.Int64
}

type flowKind int

const (
	flowContracts flowKind = iota
	flowShares
	flowRefusals
	flowPages
	flowSigning
	nFlows
)

var flowNames = [nFlows]string{"contracts", "shares", "refusals", "pages", "signing"}

// flowWeights is the mix: out of 100 flows.
var flowWeights = [nFlows]int{30, 30, 20, 10, 10}

// soakStats counts statuses per kind of request.
type soakStats struct {
	mu       sync.Mutex
	byKind   map[string]map[int]int64
	problems []string // the first few, for the summary

	total, status5xx, unexpected, errs, expected429 atomic.Int64
	classes                                         [6]atomic.Int64 // by status/100; 0 for transport errors
}

func (st *soakStats) record(kind string, status int, expected bool, detail string) {
	st.total.Add(1)
	st.classes[min(status/100, 5)].Add(1)
	switch {
	case status == 0:
		st.errs.Add(1)
	case status >= 500:
		st.status5xx.Add(1)
	case !expected:
		st.unexpected.Add(1)
	case status == http.StatusTooManyRequests:
		st.expected429.Add(1)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.byKind == nil {
		st.byKind = map[string]map[int]int64{}
	}
	m := st.byKind[kind]
	if m == nil {
		m = map[int]int64{}
		st.byKind[kind] = m
	}
	m[status]++
	if (status == 0 || status >= 500 || !expected) && len(st.problems) < 20 {
		st.problems = append(st.problems, fmt.Sprintf("%s: status %d: %s", kind, status, detail))
	}
}

// problem records a failure that is not a status (a reply that does not
// say what it should).
func (st *soakStats) problem(kind, detail string) {
	st.unexpected.Add(1)
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.problems) < 20 {
		st.problems = append(st.problems, kind+": "+detail)
	}
}

// sample is one measurement of the gateway process.
type sample struct {
	at         time.Duration
	rssKiB     int64
	heapKiB    int64 // go_memstats_heap_inuse_bytes
	liveKiB    int64 // HeapAlloc right after a forced collection
	dbKiB      int64 // size of webapi.db
	fds        int
	goroutines int
	requests   int64
	classes    [6]int64
	flows      [nFlows]int64
}

func runSoak(bin, tmp string) (failed bool) {
	dur := *soakFor
	warmup := min(time.Duration(float64(dur)*warmupShare), maxWarmup)
	dir := filepath.Join(tmp, "soak")
	log.Printf("preparing a store with %d keys, contracts and shares", *soakStore)
	d, err := prepare(store{dir: dir, storage: caddymodule.BoltStorage{}}, *soakStore, *soakStore, *soakStore)
	if err != nil {
		log.Fatal(err)
	}
	sink, err := startMailSink()
	if err != nil {
		log.Fatal(err)
	}
	defer sink.close()
	g, err := gatewayproc.Start(gatewayproc.Options{
		Bin: bin, Dir: dir, AuditOutput: "buffered_file",
		WebAPI: smtpTo(sink.addr),
	})
	if err != nil {
		log.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			g.Kill()
		}
	}()
	s := &soak{g: g, site: g.Site, mail: sink, d: d}
	tr := &http.Transport{MaxIdleConnsPerHost: 2 * *soakClients, IdleConnTimeout: 90 * time.Second, DisableCompression: true}
	s.hc = &http.Client{Transport: tr, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if err := s.makeKeys(); err != nil {
		g.Kill()
		log.Fatal(err)
	}

	fmt.Printf("keygate soak: %s, %d clients, samples every %s, warm-up %s, %d keys/contracts/shares prepared, pid %d\n\n",
		dur, *soakClients, *soakSample, warmup, *soakStore, g.Pid())
	fmt.Printf("%7s %8s %8s %8s %6s %5s %6s %9s %7s %8s %6s %6s %5s %4s %4s   %s\n",
		"time", "rss MiB", "heap MiB", "live MiB", "db MiB", "fds", "gorout", "requests", "req/s", "2xx", "3xx", "4xx", "429", "5xx", "err", "flows "+strings.Join(flowNames[:], "/"))
	var samples []sample
	take := func(at time.Duration) sample {
		sm, err := s.measure(at)
		if err != nil {
			log.Printf("sample: %v", err)
		}
		var prev sample
		if len(samples) > 0 {
			prev = samples[len(samples)-1]
		}
		rate := 0.0
		if dt := (sm.at - prev.at).Seconds(); dt > 0 {
			rate = float64(sm.requests-prev.requests) / dt
		}
		fl := make([]string, nFlows)
		for i := range fl {
			fl[i] = strconv.FormatInt(sm.flows[i], 10)
		}
		fmt.Printf("%7s %8.1f %8.1f %8.1f %6.1f %5d %6d %9d %7.0f %8d %6d %6d %5d %4d %4d   %s\n",
			sm.at.Round(time.Second), float64(sm.rssKiB)/1024, float64(sm.heapKiB)/1024, float64(sm.liveKiB)/1024, float64(sm.dbKiB)/1024, sm.fds, sm.goroutines, sm.requests, rate,
			sm.classes[2], sm.classes[3], sm.classes[4], s.stats.expected429.Load(), sm.classes[5], sm.classes[0], strings.Join(fl, "/"))
		samples = append(samples, sm)
		return sm
	}

	start := time.Now()
	base := take(0)
	s.deadline = start.Add(dur)
	var wg sync.WaitGroup
	for i := 0; i < *soakClients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s.client(i)
		}(i)
	}
	tick := time.NewTicker(*soakSample)
	warmProfile := false
	for now := range tick.C {
		at := now.Sub(start)
		if at >= dur-*soakSample/4 {
			at = time.Since(start)
			take(at)
			break
		}
		take(at)
		if !warmProfile && at >= warmup-time.Second {
			warmProfile = true
			s.saveHeapProfile("heap-warmup.pb.gz")
		}
	}
	tick.Stop()
	s.saveHeapProfile("heap-end.pb.gz")
	wg.Wait()
	elapsed := time.Since(start)

	// The load is over: close the client's connections and wait for the
	// gateway's goroutines and fds to come back near their level before it.
	tr.CloseIdleConnections()
	var idle sample
	idleBy := time.Now().Add(idleWait)
	for {
		time.Sleep(time.Second)
		idle, _ = s.measure(time.Since(start))
		if (idle.goroutines <= base.goroutines+idleGoroutineSlack && idle.fds <= base.fds+idleFDSlack) || time.Now().After(idleBy) {
			break
		}
	}
	metrics, _ := s.metricsText()
	stopErr := g.Stop()
	stopped = true

	// The verdict.
	var fails []string
	if n := s.stats.status5xx.Load(); n > 0 {
		fails = append(fails, fmt.Sprintf("%d responses were 5xx", n))
	}
	if n := s.stats.errs.Load(); n > 0 {
		fails = append(fails, fmt.Sprintf("%d requests failed without a response", n))
	}
	if n := s.stats.unexpected.Load(); n > 0 {
		fails = append(fails, fmt.Sprintf("%d responses had a status or content the mix does not expect", n))
	}
	var after []sample
	for _, sm := range samples {
		if sm.at >= warmup-time.Second {
			after = append(after, sm)
		}
	}
	var rssWarm, rssEnd, rssMax float64
	if len(after) > 0 {
		win := min(rssWindow, (after[len(after)-1].at-after[0].at)/4)
		first, last := after[0].at+win, after[len(after)-1].at-win
		var nw, ne int
		for _, sm := range after {
			if sm.at <= first {
				rssWarm += float64(sm.rssKiB)
				nw++
			}
			if sm.at >= last {
				rssEnd += float64(sm.rssKiB)
				ne++
			}
			rssMax = max(rssMax, float64(sm.rssKiB))
		}
		rssWarm, rssEnd = rssWarm/float64(nw)/1024, rssEnd/float64(ne)/1024
		rssMax /= 1024
		if growth := rssEnd/rssWarm - 1; growth > rssGrowthLimit {
			fails = append(fails, fmt.Sprintf("RSS grew %.1f%% after warm-up (%.1f → %.1f MiB), limit %.0f%%",
				100*growth, rssWarm, rssEnd, 100*rssGrowthLimit))
		}
	}
	gor := func(sm sample) float64 { return float64(sm.goroutines) }
	fdv := func(sm sample) float64 { return float64(sm.fds) }
	gTrend := trend(after, gor, goroutineMarginAbs)
	fTrend := trend(after, fdv, fdMarginAbs)
	for _, t := range []struct {
		name string
		tr   trendResult
	}{{"goroutines", gTrend}, {"open fds", fTrend}} {
		if t.tr.growing {
			fails = append(fails, fmt.Sprintf("%s keep growing after warm-up: %s", t.name, t.tr))
		}
	}
	if idle.goroutines > base.goroutines+idleGoroutineSlack {
		fails = append(fails, fmt.Sprintf("goroutines did not come back after the load: %d, %d before it (slack %d)", idle.goroutines, base.goroutines, idleGoroutineSlack))
	}
	if idle.fds > base.fds+idleFDSlack {
		fails = append(fails, fmt.Sprintf("open fds did not come back after the load: %d, %d before it (slack %d)", idle.fds, base.fds, idleFDSlack))
	}
	if stopErr != nil {
		fails = append(fails, stopErr.Error())
	}

	// The summary.
	total := s.stats.total.Load()
	fmt.Printf("\nsummary: %s of load, %d clients, %d requests (%.0f/s), flows", elapsed.Round(time.Second), *soakClients, total, float64(total)/elapsed.Seconds())
	for i, name := range flowNames {
		fmt.Printf(" %s %d", name, s.flows[i].Load())
	}
	fmt.Println()
	fmt.Printf("  statuses: 2xx %d, 3xx %d, 4xx %d (of which expected 429 %d), 5xx %d, transport errors %d, unexpected %d\n",
		s.stats.classes[2].Load(), s.stats.classes[3].Load(), s.stats.classes[4].Load(), s.stats.expected429.Load(),
		s.stats.classes[5].Load(), s.stats.errs.Load(), s.stats.unexpected.Load())
	s.stats.mu.Lock()
	kinds := make([]string, 0, len(s.stats.byKind))
	for k := range s.stats.byKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		var parts []string
		var sum int64
		codes := make([]int, 0)
		for c := range s.stats.byKind[k] {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		for _, c := range codes {
			n := s.stats.byKind[k][c]
			sum += n
			parts = append(parts, fmt.Sprintf("%d×%d", n, c))
		}
		fmt.Printf("  %-26s %8d   %s\n", k, sum, strings.Join(parts, " "))
	}
	problems := append([]string(nil), s.stats.problems...)
	s.stats.mu.Unlock()
	mails, mailBytes := sink.counts()
	fmt.Printf("  mails received by the sink: %d (%.1f MiB); %s\n", mails, float64(mailBytes)/(1<<20), notificationLine(metrics))
	fmt.Printf("  RSS: %.1f MiB before the load; mean %.1f MiB just after warm-up (%s), %.1f MiB at the end (%+.1f%%, limit %+.0f%%); peak after warm-up %.1f MiB\n",
		float64(base.rssKiB)/1024, rssWarm, warmup, rssEnd, 100*(rssEnd/max(rssWarm, 1)-1), 100*rssGrowthLimit, rssMax)
	fmt.Printf("  goroutines: %d before the load, after warm-up %s; %d after the load\n", base.goroutines, gTrend, idle.goroutines)
	fmt.Printf("  open fds:   %d before the load, after warm-up %s; %d after the load\n", base.fds, fTrend, idle.fds)
	if n, lines := errorLines(filepath.Join(dir, "caddy.log"), 5); n > 0 {
		fmt.Printf("  the gateway logged %d errors; the first:\n", n)
		for _, l := range lines {
			fmt.Printf("    %s\n", l)
		}
	}
	for _, p := range problems {
		fmt.Printf("  problem: %s\n", p)
	}
	if len(fails) > 0 {
		fmt.Printf("\nsoak FAILED:\n")
		for _, f := range fails {
			fmt.Printf("  - %s\n", f)
		}
		fmt.Printf("  (the gateway's directory is kept: %s)\n", dir)
		return true
	}
	fmt.Printf("\nsoak passed\n")
	return false
}

// trendResult describes a series after warm-up.
type trendResult struct {
	n                      int
	first, last, min, max  float64
	firstThird, lastThird  float64
	slopePerMin, projected float64
	margin                 float64
	growing                bool
}

func (t trendResult) String() string {
	if t.n == 0 {
		return "no samples"
	}
	s := fmt.Sprintf("%.0f → %.0f (min %.0f, max %.0f; thirds %.1f → %.1f; slope %+.2f/min, %+.1f over the window; margin %.0f)",
		t.first, t.last, t.min, t.max, t.firstThird, t.lastThird, t.slopePerMin, t.projected, t.margin)
	if t.n < minTrendSamples {
		s += fmt.Sprintf(" [only %d samples: trend not judged]", t.n)
	}
	return s
}

// trend fits a least-squares line to v over the samples and applies the
// growth test described at goroutineMarginAbs.
func trend(ss []sample, v func(sample) float64, marginAbs float64) trendResult {
	t := trendResult{n: len(ss)}
	if t.n == 0 {
		return t
	}
	t.first, t.last, t.min, t.max = v(ss[0]), v(ss[t.n-1]), math.Inf(1), math.Inf(-1)
	var sx, sy, sxx, sxy float64
	for _, sm := range ss {
		x, y := sm.at.Minutes(), v(sm)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		t.min, t.max = math.Min(t.min, y), math.Max(t.max, y)
	}
	n := float64(t.n)
	if den := n*sxx - sx*sx; den > 0 {
		t.slopePerMin = (n*sxy - sx*sy) / den
	}
	t.projected = t.slopePerMin * (ss[t.n-1].at - ss[0].at).Minutes()
	third := max(t.n/3, 1)
	mean := func(part []sample) float64 {
		var s float64
		for _, sm := range part {
			s += v(sm)
		}
		return s / float64(len(part))
	}
	t.firstThird, t.lastThird = mean(ss[:third]), mean(ss[t.n-third:])
	t.margin = math.Max(marginAbs, countMarginRel*t.firstThird)
	t.growing = t.n >= minTrendSamples && t.projected > t.margin && t.lastThird-t.firstThird > t.margin/2
	return t
}

// measure reads the gateway's RSS and open fds from /proc and its
// goroutines from the admin endpoint's metrics.
func (s *soak) measure(at time.Duration) (sample, error) {
	sm := sample{at: at, requests: s.stats.total.Load()}
	for i := range sm.classes {
		sm.classes[i] = s.stats.classes[i].Load()
	}
	for i := range sm.flows {
		sm.flows[i] = s.flows[i].Load()
	}
	pid := s.g.Pid()
	var errs []error
	if st, err := os.Stat(filepath.Join(s.g.Dir(), "webapi.db")); err == nil {
		sm.dbKiB = st.Size() / 1024
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				sm.rssKiB, _ = strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			}
		}
	} else {
		errs = append(errs, err)
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		sm.fds = len(ents)
	} else {
		errs = append(errs, err)
	}
	if text, err := s.metricsText(); err == nil {
		if v, ok := metricValue(text, "go_goroutines"); ok {
			sm.goroutines = int(v)
		} else {
			errs = append(errs, errors.New("no go_goroutines in /metrics"))
		}
		if v, ok := metricValue(text, "go_memstats_heap_inuse_bytes"); ok {
			sm.heapKiB = int64(v / 1024)
		}
	} else {
		errs = append(errs, err)
	}
	// Last, as it collects garbage: the live heap, what a leak in Go
	// memory grows, free of the collector's timing that RSS and the heap
	// in use swing with.
	if v, err := s.liveHeap(); err == nil {
		sm.liveKiB = v / 1024
	} else {
		errs = append(errs, err)
	}
	return sm, errors.Join(errs...)
}

// liveHeap is HeapAlloc just after a collection, as the heap profile
// with gc=1 reports it.
func (s *soak) liveHeap() (int64, error) {
	resp, err := http.Get(s.g.Admin + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	return 0, errors.New("no HeapAlloc in the heap profile")
}

// saveHeapProfile writes the gateway's heap profile into its directory,
// for `go tool pprof -diff_base heap-warmup.pb.gz heap-end.pb.gz` when a
// soak fails (its directory is kept then, or with -keep).
func (s *soak) saveHeapProfile(name string) {
	resp, err := http.Get(s.g.Admin + "/debug/pprof/heap")
	if err != nil {
		log.Printf("heap profile: %v", err)
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(filepath.Join(s.g.Dir(), name), b, 0o600)
	}
	if err != nil {
		log.Printf("heap profile: %v", err)
	}
}

func (s *soak) metricsText() (string, error) {
	resp, err := http.Get(s.g.Admin + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// metricValue is the value of an unlabelled metric in a Prometheus text.
func metricValue(text, name string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

// notificationLine sums keygate_notifications_total by outcome.
func notificationLine(text string) string {
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "keygate_notifications_total{") {
			continue
		}
		i := strings.Index(line, `outcome="`)
		j := strings.LastIndexByte(line, ' ')
		if i < 0 || j < 0 {
			continue
		}
		o := line[i+len(`outcome="`):]
		o = o[:strings.IndexByte(o, '"')]
		v, _ := strconv.ParseFloat(line[j+1:], 64)
		out[o] += v
	}
	var parts []string
	for k, v := range out {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, v))
	}
	sort.Strings(parts)
	return "notifications: " + strings.Join(parts, ", ")
}

// errorLines counts the error-level entries of a JSON log and returns the
// first n.
func errorLines(path string, n int) (int, []string) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil
	}
	defer f.Close()
	var count int
	var first []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"fatal"`) || strings.Contains(line, `"level":"panic"`) {
			count++
			if len(first) < n {
				first = append(first, line)
			}
		}
	}
	return count, first
}

// makeKeys creates the keys the refusals use.
func (s *soak) makeKeys() error {
	k, err := s.g.CreateKey("contracts", "soak get only", "user-01", []string{"get"}, nil)
	if err != nil {
		return err
	}
	s.contractsGetOnly = k.Token
	k, err = s.g.CreateKey("share", "soak get only", "user-01", []string{"get"}, map[string]any{"adminProjects": []string{"*"}})
	if err != nil {
		return err
	}
	s.shareGetOnly = k.Token
	k, err = s.g.CreateKey("contracts", "soak later", "user-02", []string{"get", "search"},
		map[string]any{"notValidBefore": time.Now().AddDate(5, 0, 0).UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	s.notYetValid = k.Token
	return nil
}

// soakClient is one client's state.
type soakClient struct {
	s         *soak
	id, n     int
	rng       *rand.Rand
	contracts []string // ids it created and keeps for now
	shares    []string // uuids
}

func (s *soak) client(id int) {
	c := &soakClient{s: s, id: id, rng: rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))}
	total := 0
	for _, w := range flowWeights {
		total += w
	}
	for time.Now().Before(s.deadline) {
		r := c.rng.IntN(total)
		k := flowKind(0)
		for ; r >= flowWeights[k]; k++ {
			r -= flowWeights[k]
		}
		switch k {
		case flowContracts:
			c.contractsFlow()
		case flowShares:
			c.sharesFlow()
		case flowRefusals:
			c.refusalsFlow()
		case flowPages:
			c.pagesFlow()
		case flowSigning:
			c.signingFlow()
		}
		s.flows[k].Add(1)
	}
}

// call sends one request and records its status under kind; ok reports
// whether the status is one of want.
func (c *soakClient) call(kind, method, target string, h http.Header, body []byte, want ...int) (*http.Response, []byte, bool) {
	if !strings.HasPrefix(target, "http") {
		target = c.s.site + target
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, target, rd)
	if err != nil {
		c.s.stats.record(kind, 0, false, err.Error())
		return nil, nil, false
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	resp, err := c.s.hc.Do(req)
	if err != nil {
		c.s.stats.record(kind, 0, false, err.Error())
		return nil, nil, false
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.s.stats.record(kind, 0, false, "reading the body: "+err.Error())
		return nil, nil, false
	}
	ok := false
	for _, w := range want {
		ok = ok || resp.StatusCode == w
	}
	detail := ""
	if !ok {
		detail = method + " " + req.URL.Path + ": " + shorten(string(b), 300)
	}
	c.s.stats.record(kind, resp.StatusCode, ok, detail)
	return resp, b, ok
}

func shorten(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

func jsonAuth(token string) http.Header {
	h := bearer(token)
	h.Set("Content-Type", "application/json")
	return h
}

var acceptJSON = http.Header{"Accept": {"application/json"}}

func (c *soakClient) contractsFlow() {
	s, d := c.s, c.s.d
	c.n++
	tpl := d.templates[c.rng.IntN(len(d.templates))]
	_, b, ok := c.call("contract create", "POST", "/webapi/contracts", jsonAuth(d.contractsToken), contractBody(tpl, c.rng.IntN(1<<20)), 201)
	var created struct{ ID string }
	if ok {
		if err := json.Unmarshal(b, &created); err != nil || created.ID == "" {
			s.stats.problem("contract create", "no id in the reply")
			ok = false
		}
	}
	if ok {
		c.call("contract get", "GET", "/webapi/contracts/"+created.ID, bearer(d.contractsToken), nil, 200)
		if c.rng.IntN(2) == 0 {
			c.call("contract archive", "PATCH", "/webapi/contracts/"+created.ID, bearer(d.contractsToken), nil, 204)
		}
		c.contracts = append(c.contracts, created.ID)
	}
	q := url.Values{"template-id": {tpl}, "creator-id": {d.creators[c.rng.IntN(len(d.creators))]},
		"order": {"creation-date-desc"}, "page-size": {"100"}}
	c.call("contract search", "GET", "/webapi/contracts?"+q.Encode(), bearer(d.contractsToken), nil, 200)
	switch c.rng.IntN(4) {
	case 0:
		q = url.Values{"substring": {[]string{"Zoë", "brook", "ACME", "lima"}[c.rng.IntN(4)]}, "order": {"creation-date-desc"}}
		c.call("contract search substring", "GET", "/webapi/contracts?"+q.Encode(), bearer(d.contractsToken), nil, 200)
	case 1:
		q = url.Values{"statuses": {"sent|ongoing"}, "order": {"name-asc"}, "page": {strconv.Itoa(1 + c.rng.IntN(5))}}
		c.call("contract search", "GET", "/webapi/contracts?"+q.Encode(), bearer(d.contractsToken), nil, 200)
	}
	c.call("contract get", "GET", "/webapi/contracts/"+d.contractID, bearer(d.contractsToken), nil, 200)
	for len(c.contracts) > 8 {
		id := c.contracts[0]
		c.contracts = c.contracts[1:]
		c.call("contract delete", "DELETE", "/webapi/contracts/"+id, bearer(d.contractsToken), nil, 204)
		if c.rng.IntN(4) == 0 {
			c.call("contract get deleted", "GET", "/webapi/contracts/"+id, bearer(d.contractsToken), nil, 404)
		}
	}
}

func (c *soakClient) createShare(kind string, body map[string]any) (string, bool) {
	b, _ := json.Marshal(body)
	_, rb, ok := c.call(kind, "POST", "/webapi/share", jsonAuth(c.s.d.shareToken), b, 201)
	if !ok {
		return "", false
	}
	var sh struct{ UUID string }
	if err := json.Unmarshal(rb, &sh); err != nil || sh.UUID == "" {
		c.s.stats.problem(kind, "no uuid in the reply")
		return "", false
	}
	return sh.UUID, true
}

func (c *soakClient) sharesFlow() {
	d := c.s.d
	c.n++
	project := d.projects[c.rng.IntN(len(d.projects))]
	body := map[string]any{"type": "JQL", "projectId": project, "jql": fmt.Sprintf("project = P%d AND n = %d", c.id, c.n),
		"expirationExpression": map[string]any{"days": 1 + c.rng.IntN(90)},
		"fieldsConfig":         map[string]any{"fieldConfigs": map[string]any{"summary": map[string]any{"fieldPermissions": []string{"VIEW"}}}}}
	if id, ok := c.createShare("share create", body); ok {
		c.call("share get", "GET", "/webapi/share/"+id, bearer(d.shareToken), nil, 200)
		body["jql"] = fmt.Sprintf("project = P%d AND n = %d ORDER BY updated", c.id, c.n)
		b, _ := json.Marshal(body)
		c.call("share update", "PUT", "/webapi/share/"+id, jsonAuth(d.shareToken), b, 200)
		if c.rng.IntN(3) == 0 {
			c.call("share page open", "GET", "/s/"+id, acceptJSON, nil, 200)
		}
		c.call("share activity", "GET", "/webapi/share/"+id+"/activity?limit=20", bearer(d.shareToken), nil, 200)
		c.shares = append(c.shares, id)
	}
	q := url.Values{"projectId": {project}, "sort": {[]string{"created_at", "id", "opened_count", "updated_at"}[c.rng.IntN(4)]},
		"sortOrder": {"desc"}, "limit": {"50"}}
	c.call("share list", "GET", "/webapi/share?"+q.Encode(), bearer(d.shareToken), nil, 200)
	c.call("share get", "GET", "/webapi/share/"+d.shareUUID, bearer(d.shareToken), nil, 200)
	for len(c.shares) > 8 {
		id := c.shares[0]
		c.shares = c.shares[1:]
		c.call("share delete", "DELETE", "/webapi/share/"+id, bearer(d.shareToken), nil, 204)
	}
}

func (c *soakClient) refusalsFlow() {
	s, d := c.s, c.s.d
	unknown := "00000000-0000-4000-8000-000000000000"
	all := []func(){
		func() { c.call("refusal no key", "GET", "/webapi/contracts?order=name-asc", nil, nil, 401) },
		func() {
			tok := make([]byte, 32)
			for i := range tok {
				tok[i] = byte(c.rng.IntN(256))
			}
			c.call("refusal unknown token", "GET", "/webapi/share/"+d.shareUUID, bearer("kg_"+base64.RawURLEncoding.EncodeToString(tok)), nil, 401)
		},
		func() {
			c.call("refusal not yet valid", "GET", "/webapi/contracts/"+d.contractID, bearer(s.notYetValid), nil, 401)
		},
		func() {
			c.call("refusal other service", "GET", "/webapi/contracts/"+d.contractID, bearer(d.shareToken), nil, 401)
		},
		func() {
			c.call("refusal no privilege", "GET", "/webapi/contracts?order=name-asc", bearer(s.contractsGetOnly), nil, 403)
		},
		func() {
			c.call("refusal no privilege", "POST", "/webapi/share", jsonAuth(s.shareGetOnly), []byte(`{"type":"JQL","projectId":"10000","jql":"x"}`), 403)
		},
		func() {
			c.call("refusal no privilege", "DELETE", "/webapi/contracts/"+d.contractID, bearer(s.contractsGetOnly), nil, 403)
		},
		func() {
			c.call("not found", "GET", "/webapi/contracts/"+unknown, bearer(d.contractsToken), nil, 404)
		},
		func() {
			c.call("not found", "GET", "/sign/"+base64.RawURLEncoding.EncodeToString(make([]byte, 32)), acceptJSON, nil, 404)
		},
		func() { c.call("not found", "GET", "/s/"+unknown, nil, nil, 404) },
	}
	for _, i := range c.rng.Perm(len(all))[:3] {
		all[i]()
	}
}

func (c *soakClient) pagesFlow() {
	s, d := c.s, c.s.d
	c.n++
	password := fmt.Sprintf("pw-%d-%d-%d", c.id, c.n, c.rng.IntN(1e6))
	id, ok := c.createShare("share create (password)", map[string]any{
		"type": "ISSUE", "issueId": fmt.Sprintf("SOAK-%d-%d", c.id, c.n), "projectId": d.projects[c.rng.IntN(len(d.projects))],
		"password": password, "customFields": []map[string]string{{"id": "summary"}, {"id": "description"}},
	})
	if !ok {
		return
	}
	page := "/s/" + id
	form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
	c.call("share page locked", "GET", page, nil, nil, 200)
	c.call("share page locked json", "GET", page, acceptJSON, nil, 401)
	c.call("share unlock wrong", "POST", page+"/unlock", form, []byte("password=wrong"), 401)
	resp, _, ok := c.call("share unlock", "POST", page+"/unlock", form, []byte(url.Values{"password": {password}}.Encode()), 303)
	if ok {
		var cookie string
		for _, ck := range resp.Cookies() {
			cookie = ck.Name + "=" + ck.Value
		}
		if cookie == "" {
			s.stats.problem("share unlock", "no cookie set")
		} else {
			h := http.Header{"Cookie": {cookie}}
			c.call("share page open", "GET", page, h, nil, 200)
			h.Set("Accept", "application/json")
			c.call("share page open", "GET", page, h, nil, 200)
		}
	}
	if c.rng.IntN(5) == 0 {
		// Wrong passwords until the limiter steps in: a burst of 5 per
		// share and client address, one of which is spent above.
		limited := false
		for i := 0; i < 8 && !limited; i++ {
			resp, _, _ := c.call("share unlock wrong", "POST", page+"/unlock", form, []byte("password=wrong"), 401, 429)
			limited = resp != nil && resp.StatusCode == http.StatusTooManyRequests
		}
		if !limited {
			s.stats.problem("share unlock wrong", "no 429 after 8 wrong passwords")
		}
	}
	c.call("share activity", "GET", "/webapi/share/"+id+"/activity", bearer(d.shareToken), nil, 200)
	c.call("share delete", "DELETE", "/webapi/share/"+id, bearer(d.shareToken), nil, 204)
}

// signaturePNG is a small drawn signature, base64.
var signaturePNG = func() string {
	img := image.NewNRGBA(image.Rect(0, 0, 240, 80))
	for x := 10; x < 230; x++ {
		y := 40 + int(20*math.Sin(float64(x)/15))
		for dy := -1; dy <= 1; dy++ {
			img.Set(x, y+dy, color.NRGBA{0, 0, 80, 255})
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(b.Bytes())
}()

func (c *soakClient) signingFlow() {
	s, d := c.s, c.s.d
	c.n++
	email := fmt.Sprintf("soak-%d-%d@example.com", c.id, c.n)
	body, _ := json.Marshal(map[string]any{
		"templateId": d.templates[c.rng.IntN(len(d.templates))],
		"name":       fmt.Sprintf("Soak signing %d-%d", c.id, c.n),
		"signers": []map[string]any{
			{"fullName": "Ana Lima", "accessKind": "url", "otpMethod": "none", "signerSigningMethods": []string{"draw", "render"}},
			{"fullName": "Zoë Ångström", "accessKind": "email", "email": email, "appendSignatureMacro": true},
		},
		"watchers": []map[string]any{{"name": "Legal", "email": "legal@example.com", "notificationKinds": "created|signed|rejected|completed|completed-contract"}},
	})
	_, rb, ok := c.call("signing create", "POST", "/webapi/contracts", jsonAuth(d.contractsToken), body, 201)
	if !ok {
		return
	}
	var created struct {
		ID      string
		Signers []struct{ AccessURL string }
	}
	if err := json.Unmarshal(rb, &created); err != nil || len(created.Signers) != 2 || created.Signers[0].AccessURL == "" || created.Signers[1].AccessURL == "" {
		s.stats.problem("signing create", "no accessUrl for both signers")
		return
	}
	defer c.call("contract delete", "DELETE", "/webapi/contracts/"+created.ID, bearer(d.contractsToken), nil, 204)
	urlSigner, mailSigner := created.Signers[0].AccessURL, created.Signers[1].AccessURL
	jsonBody := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}

	c.call("signing page", "GET", urlSigner, nil, nil, 200)
	c.call("signing page json", "GET", mailSigner, acceptJSON, nil, 200)
	c.call("signing decision", "POST", urlSigner+"/decision", jsonBody,
		[]byte(`{"decision":"signed","method":"draw","signature":"`+signaturePNG+`"}`), 200)

	c.call("signing otp", "POST", mailSigner+"/otp", acceptJSON, nil, 202)
	c.call("signing otp again", "POST", mailSigner+"/otp", acceptJSON, nil, 429)
	code, ok := s.mail.takeOTP(email, 60*time.Second)
	if !ok {
		s.stats.problem("signing otp", "no password mailed to "+email+" within 60 s")
		return
	}
	if c.rng.IntN(4) == 0 {
		wrong := fmt.Sprintf("%06d", (mustAtoi(code)+1)%1000000)
		c.call("signing decision wrong otp", "POST", mailSigner+"/decision", jsonBody,
			[]byte(`{"decision":"signed","otp":"`+wrong+`","method":"draw","signature":"`+signaturePNG+`"}`), 400)
	}
	want := "signed"
	if c.rng.IntN(5) == 0 {
		want = "rejected"
		c.call("signing decision", "POST", mailSigner+"/decision", jsonBody,
			[]byte(`{"decision":"rejected","otp":"`+code+`","reason":"The dates are wrong."}`), 200)
	} else {
		c.call("signing decision", "POST", mailSigner+"/decision", jsonBody,
			[]byte(`{"decision":"signed","otp":"`+code+`","method":"draw","signature":"`+signaturePNG+`"}`), 200)
	}
	var got struct {
		Status         string
		DocumentStatus string
		FinalizedPdf   *struct{ URL string }
	}
	// A signed contract's documents are sealed right after the last
	// signature: asked for again while they are being sealed, for at
	// most 10 s.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, gb, ok := c.call("contract get", "GET", "/webapi/contracts/"+created.ID, bearer(d.contractsToken), nil, 200)
		if !ok {
			return
		}
		if err := json.Unmarshal(gb, &got); err != nil || got.Status != want {
			s.stats.problem("signing", fmt.Sprintf("contract is %q after the decisions, want %q", got.Status, want))
			return
		}
		if got.DocumentStatus != "being_sealed" || time.Now().After(deadline) {
			break
		}
	}
	if want == "signed" {
		if got.FinalizedPdf == nil || got.FinalizedPdf.URL == "" {
			s.stats.problem("signing", "signed contract without finalizedPdf")
			return
		}
		if c.rng.IntN(2) == 0 {
			c.call("contract attachment", "GET", got.FinalizedPdf.URL, bearer(d.contractsToken), nil, 200)
		}
	}
}

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
