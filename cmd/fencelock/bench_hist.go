package main

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"strings"
	"time"
)

// histSub is log2 of the buckets per power of two: 32 of them keep a percentile read from the
// histogram within about 3% of the exact one, in constant memory however long the run.
const (
	histSub     = 5
	histBuckets = (64 - histSub + 1) << histSub
)

// latencyHist is a log-linear histogram of durations. It is not safe for concurrent use: each
// goroutine keeps its own and they are merged.
type latencyHist struct {
	counts   [histBuckets]uint64
	n        uint64
	sum      time.Duration
	min, max time.Duration
}

func histIndex(v uint64) int {
	if v < 2<<histSub {
		return int(v)
	}
	e := bits.Len64(v) - histSub - 1
	return (e+1)<<histSub + int(v>>e) - 1<<histSub
}

// histBounds returns the values [lo, hi) that bucket i holds.
func histBounds(i int) (lo, hi uint64) {
	if i < 2<<histSub {
		return uint64(i), uint64(i) + 1
	}
	e := i>>histSub - 1
	m := uint64(i&(1<<histSub-1) + 1<<histSub)
	return m << e, (m + 1) << e
}

func (h *latencyHist) add(d time.Duration) {
	d = max(d, 0)
	h.counts[histIndex(uint64(d))]++
	if h.n == 0 || d < h.min {
		h.min = d
	}
	h.max = max(h.max, d)
	h.n++
	h.sum += d
}

func (h *latencyHist) merge(o *latencyHist) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
}

// quantile returns the q-quantile (0 < q ≤ 1): the middle of the bucket that holds it, kept
// within the exact minimum and maximum.
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.n))), 1)
	var seen uint64
	for i, c := range h.counts {
		if seen += c; seen >= rank {
			lo, hi := histBounds(i)
			return min(max(time.Duration((lo+hi)/2), h.min), h.max)
		}
	}
	return h.max
}

// latencyStats are a histogram's numbers for --json, in microseconds.
type latencyStats struct {
	Count     uint64    `json:"count"`
	MinUS     float64   `json:"min_us"`
	MeanUS    float64   `json:"mean_us"`
	P50US     float64   `json:"p50_us"`
	P90US     float64   `json:"p90_us"`
	P99US     float64   `json:"p99_us"`
	MaxUS     float64   `json:"max_us"`
	Histogram []histBar `json:"histogram"`
}

// histBar is one row of the printed histogram: the count of durations in [from, to).
type histBar struct {
	FromUS float64 `json:"from_us"`
	ToUS   float64 `json:"to_us"`
	Count  uint64  `json:"count"`
}

func (h *latencyHist) stats() latencyStats {
	s := latencyStats{Count: h.n, Histogram: h.bars()}
	if h.n == 0 {
		s.Histogram = []histBar{}
		return s
	}
	s.MinUS, s.MaxUS = micros(h.min), micros(h.max)
	s.MeanUS = micros(h.sum / time.Duration(h.n))
	s.P50US, s.P90US, s.P99US = micros(h.quantile(0.5)), micros(h.quantile(0.9)), micros(h.quantile(0.99))
	return s
}

func micros(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)*10) / 10
}

// barEdges are the rows of the printed histogram: 1-2-5 steps from 1µs to 100s.
var barEdges = func() []time.Duration {
	var e []time.Duration
	for d := time.Microsecond; d <= 100*time.Second; d *= 10 {
		e = append(e, d, 2*d, 5*d)
	}
	return e
}()

// bars regroups the fine buckets into barEdges rows, from the row of the minimum to the row of
// the maximum. A bucket goes to the row of its middle, kept within the minimum and the maximum:
// a bucket's middle may lie past an edge that none of its samples reach.
func (h *latencyHist) bars() []histBar {
	if h.n == 0 {
		return nil
	}
	rows := make([]uint64, len(barEdges)+1) // row i holds [edge i-1, edge i)
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		lo, hi := histBounds(i)
		rows[barRow(min(max(time.Duration((lo+hi)/2), h.min), h.max))] += c
	}
	first, last := barRow(h.min), barRow(h.max)
	var out []histBar
	for r := first; r <= last; r++ {
		from, to := time.Duration(0), time.Duration(math.MaxInt64)
		if r > 0 {
			from = barEdges[r-1]
		}
		if r < len(barEdges) {
			to = barEdges[r]
		}
		out = append(out, histBar{FromUS: micros(from), ToUS: micros(to), Count: rows[r]})
	}
	return out
}

func barRow(d time.Duration) int {
	for i, e := range barEdges {
		if d < e {
			return i
		}
	}
	return len(barEdges)
}

// printLatency prints the percentiles and the histogram, indented.
func printLatency(w io.Writer, s latencyStats) {
	if s.Count == 0 {
		fmt.Fprintln(w, "  no samples")
		return
	}
	fmt.Fprintf(w, "  p50 %v  p90 %v  p99 %v  max %v  (mean %v, %d samples)\n",
		usDur(s.P50US), usDur(s.P90US), usDur(s.P99US), usDur(s.MaxUS), usDur(s.MeanUS), s.Count)
	var most uint64
	for _, b := range s.Histogram {
		most = max(most, b.Count)
	}
	for _, b := range s.Histogram {
		label := fmt.Sprintf("%v–%v", usDur(b.FromUS), usDur(b.ToUS))
		switch {
		case b.FromUS == 0:
			label = "< " + usDur(b.ToUS).String()
		case b.ToUS >= micros(time.Duration(math.MaxInt64)):
			label = "≥ " + usDur(b.FromUS).String()
		}
		width := 0
		if most > 0 {
			width = int(math.Ceil(40 * float64(b.Count) / float64(most)))
		}
		fmt.Fprintf(w, "    %13s  %-40s %d\n", label, strings.Repeat("#", width), b.Count)
	}
}

func usDur(us float64) time.Duration {
	return roundDur(time.Duration(us * float64(time.Microsecond)))
}
