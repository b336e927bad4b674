package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// benchProgress draws one progress line on stderr, redrawn in place, when stderr is a
// terminal; otherwise it says nothing, so that logs and pipes stay clean. It is used from one
// goroutine.
type benchProgress struct {
	w     io.Writer // nil when quiet
	last  time.Time
	shown bool
}

func newBenchProgress(stderr io.Writer) *benchProgress {
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			return &benchProgress{w: f}
		}
	}
	return &benchProgress{}
}

// show redraws the line at most ten times a second.
func (p *benchProgress) show(phase string, frac float64, n int64) {
	if p.w == nil || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	filled := int(frac * width)
	fmt.Fprintf(p.w, "\r\033[K%-11s [%s%s] %3.0f%%  %d ops", phase,
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), 100*frac, n)
	p.shown = true
}

// clear erases the line, so that the results start on a clean one.
func (p *benchProgress) clear() {
	if p.w != nil && p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}
