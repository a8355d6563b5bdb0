package main

import (
	"fmt"
	"strings"
	"time"
)

// The import figure: keys a second of one POST /webapi/keys/import of
// importCount keys, each with the token it has on another gateway, on the
// bench's backend (the goal holds on both): the request's wall time, from
// the first byte sent to the report, best of the rounds.

const importCount = 10000

// importRate imports importCount new keys into g per round, each round
// with tokens of its own, and returns the best rate.
func (g *gatewayProc) importRate(rounds int) (best float64, err error) {
	for r := range rounds {
		var b strings.Builder
		for i := range importCount {
			fmt.Fprintf(&b, `{"service":"share","name":"imported %d","owner":"owner-%d","privileges":["get","list"],"token":"bench-import-%d-%08d-token"}`+"\n", i, i%50, r, i)
		}
		body := map[string]any{"format": "jsonl", "data": b.String()}
		var report struct{ Imported int }
		start := time.Now()
		if err := g.AdminJSON("POST", "/webapi/keys/import", body, &report); err != nil {
			return 0, err
		}
		took := time.Since(start)
		if report.Imported != importCount {
			return 0, fmt.Errorf("import: %d keys imported, want %d", report.Imported, importCount)
		}
		rate := importCount / took.Seconds()
		fmt.Printf("  round %d: %d keys in %s: %.0f keys/s\n", r+1, importCount, took.Round(time.Millisecond), rate)
		best = max(best, rate)
	}
	return best, nil
}
