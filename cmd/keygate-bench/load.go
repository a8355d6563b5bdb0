package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// request is one prepared HTTP/1.1 request, written as bytes so the load
// generator spends as little CPU as it can: on a 2-core machine every
// cycle it takes is a cycle the gateway does not get.
type request struct {
	raw    []byte
	expect int // the status a success answers
	// alt is another status the run accepts (a 429 of a rate-limited
	// flood), counted apart from the successes; 0: none.
	alt int
}

func newRequest(method, host, path string, header http.Header, body []byte, expect int) request {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, host)
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	if body != nil {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.Write(body)
	return request{raw: b.Bytes(), expect: expect}
}

// conn is one keep-alive connection that sends a request and reads the
// response, skipping its body by Content-Length.
type conn struct {
	c  net.Conn
	br *bufio.Reader
}

func dial(addr string) (*conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, br: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (c *conn) do(req request) (int, error) {
	if _, err := c.c.Write(req.raw); err != nil {
		return 0, err
	}
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 {
		return 0, errors.New("short status line")
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, err
	}
	length, chunked := -1, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		if len(line) <= 2 {
			break
		}
		if len(line) > 16 && bytes.EqualFold(line[:15], []byte("Content-Length:")) {
			length, _ = strconv.Atoi(string(bytes.TrimSpace(line[15:])))
		}
		if bytes.HasPrefix(line, []byte("Transfer-Encoding: chunked")) {
			chunked = true
		}
	}
	switch {
	case chunked:
		return status, c.skipChunks()
	case length < 0:
		return 0, errors.New("response without Content-Length")
	}
	_, err = c.br.Discard(length)
	return status, err
}

// skipChunks reads a chunked body to its end.
func (c *conn) skipChunks() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(line, []byte(";"), 2)[0])), 16, 64)
		if err != nil {
			return err
		}
		if _, err := c.br.Discard(int(size) + 2); err != nil { // data and CRLF
			return err
		}
		if size == 0 {
			return nil
		}
	}
}

// result is what a load run measured.
type result struct {
	requests  int64 // answered with the expected status
	alts      int64 // answered with the request's alt status
	failures  int64
	start     time.Time // when the first request went
	elapsed   time.Duration
	latencies []time.Duration // only when kept
	// cpu is the gateway's CPU time (user and system) during the run,
	// where the caller measured it.
	cpu time.Duration
}

func (r result) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// cpuPerRequest is the gateway's CPU time per answered request, in µs.
func (r result) cpuPerRequest() float64 {
	return float64(r.cpu.Microseconds()) / float64(r.requests+r.alts)
}

// load runs clients connections for d, each sending next(i) in a loop.
func load(addr string, clients int, d time.Duration, keepLatency bool, next func(client, n int) request) (result, error) {
	var ok, alt, failed atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := dial(addr)
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			defer c.c.Close()
			var mine []time.Duration
			for n := 0; time.Now().Before(deadline); n++ {
				req := next(i, n)
				t0 := time.Now()
				status, err := c.do(req)
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				if keepLatency {
					mine = append(mine, time.Since(t0))
				}
				if status == req.expect {
					ok.Add(1)
				} else if req.alt != 0 && status == req.alt {
					alt.Add(1)
				} else if failed.Add(1) == 1 {
					mu.Lock()
					firstErr = fmt.Errorf("status %d, want %d", status, req.expect)
					mu.Unlock()
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	return result{requests: ok.Load(), alts: alt.Load(), failures: failed.Load(), start: start, elapsed: time.Since(start), latencies: lat}, firstErr
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

// drain reads and discards a body; used by the plain net/http calls.
func drain(r io.ReadCloser) {
	_, _ = io.Copy(io.Discard, r)
	r.Close()
}
