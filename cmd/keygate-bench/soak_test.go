package main

import (
	"math"
	"testing"
	"time"
)

// The growth test of the soak: noise around a level passes, a steady
// climb fails, one late spike passes.
func TestTrend(t *testing.T) {
	series := func(f func(i int) float64) []sample {
		var ss []sample
		for i := 0; i < 32; i++ {
			ss = append(ss, sample{at: 2*time.Minute + time.Duration(i)*15*time.Second, goroutines: int(f(i))})
		}
		return ss
	}
	gor := func(sm sample) float64 { return float64(sm.goroutines) }
	for _, c := range []struct {
		name string
		f    func(i int) float64
		want bool
	}{
		{"flat", func(int) float64 { return 60 }, false},
		{"noise", func(i int) float64 { return 60 + 30*math.Sin(float64(i)*1.7) }, false},
		{"in-flight swings", func(i int) float64 { return 40 + float64(i%2)*35 }, false},
		{"one late spike", func(i int) float64 { return 60 + float64(map[bool]int{true: 200}[i == 31]) }, false},
		{"slow climb", func(i int) float64 { return 60 + 3*float64(i) }, true},
		{"leak per request", func(i int) float64 { return 60 + 500*float64(i) }, true},
	} {
		got := trend(series(c.f), gor, goroutineMarginAbs)
		if got.growing != c.want {
			t.Errorf("%s: growing = %v, want %v (%s)", c.name, got.growing, c.want, got)
		}
	}
	if trend(series(func(i int) float64 { return 60 + 500*float64(i) })[:4], gor, goroutineMarginAbs).growing {
		t.Error("judged a trend on 4 samples")
	}
}
