package main

import (
	"testing"
	"time"
)

// Every sample is in the printed histogram, whatever its value. A fine bucket holds a range of
// values, and its middle can lie past a row's edge that its samples do not reach: a maximum
// just under an edge was counted in the row after it, which the histogram does not print, and
// bench's JSON once showed 199 samples of 200 (TestBenchJSON).
func TestHistogramBarsHoldEverySample(t *testing.T) {
	for _, edge := range barEdges {
		for _, d := range []time.Duration{edge - edge/50, edge - edge/200, edge - 1, edge, edge + edge/200, edge + edge/50} {
			for _, others := range [][]time.Duration{nil, {time.Microsecond / 2}, {10 * edge}} {
				var h latencyHist
				h.add(d)
				for _, o := range others {
					h.add(o)
				}
				var n uint64
				for _, b := range h.bars() {
					n += b.Count
				}
				if n != h.n {
					t.Errorf("samples %v and %v: the bars hold %d of %d", d, others, n, h.n)
				}
			}
		}
	}
}
