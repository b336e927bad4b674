package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// durations is a sample of durations.
type durations []time.Duration

// sorted returns the sample sorted, leaving d alone.
func (d durations) sorted() durations {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

// quantile returns the q-quantile (nearest rank) of a sorted sample, 0 for an empty one.
func (d durations) quantile(q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// jain returns Jain's fairness index of the counts: 1 when all are equal, 1/n when one worker
// got everything.
func jain(counts []int) float64 {
	var sum, sq float64
	for _, c := range counts {
		sum += float64(c)
		sq += float64(c) * float64(c)
	}
	if sq == 0 {
		return 0
	}
	return sum * sum / (float64(len(counts)) * sq)
}

// µs formats a duration in microseconds, or milliseconds from 10ms up.
func µs(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

// µs1 formats a short duration in microseconds with one decimal.
func µs1(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }

// ratio formats a/b, "–" when b is zero.
func ratio(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
