package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// sizingSection renders the sizing scenario: a table of every step, and a chart per backend.
func (r *report) sizingSection(sb *strings.Builder) {
	if len(r.sizing) == 0 {
		return
	}
	fmt.Fprintf(sb, "## 10. Sizing: how far one deployment carries you\n\n"+
		"One fencelock Client (defaults, watchdog on) per deployment; at each count of callers,\n"+
		"that many goroutines cycle TryObtain and Release for %v, each on a name of its own (so a\n"+
		"Cluster spreads them over its slots). Server CPU is every server process's, per cycle;\n"+
		"cycles/s per server core is its inverse, what one core of that deployment carries at\n"+
		"saturation. The client and the servers share this machine's CPUs (see pinning above), so\n"+
		"where the client's CPU is the limit, the cycles/s below are this machine's, not the\n"+
		"deployment's: read the server CPU per cycle for the deployment's own bound.\n\n",
		r.cfg.sizingStep)
	var rows [][]string
	for _, row := range r.sizing {
		t := row.target
		if row.err != nil {
			rows = append(rows, []string{t.backend, t.label, "–", "–", "–", "–", "–", "–", "failed: " + oneLine(row.err)})
			continue
		}
		for _, p := range row.points {
			cpu, perCore := "–", "–"
			if p.serverCPU > 0 {
				cpu, perCore = µs1(p.serverCPU), fmt.Sprintf("%.0f", float64(time.Second)/float64(p.serverCPU))
			}
			rate := fmt.Sprintf("%.0f", p.perSec)
			if p.perSec < 10 {
				rate = fmt.Sprintf("%.2f", p.perSec) // never "0" for a step that made a cycle
			}
			rows = append(rows, []string{t.backend, t.label, strconv.Itoa(p.callers), rate,
				ms(p.p50), ms(p.p99), cpu, perCore, failures(int(p.failures), p.firstErr)})
		}
	}
	table(sb, []string{"backend", "deployment", "callers", "cycles/s", "p50", "p99", "server CPU/cycle", "cycles/s per server core", "failures"}, rows)
	for _, b := range sizingBackends(r.sizing) {
		fmt.Fprintf(sb, "![%s: cycles/s and p99 against callers](%s)\n\n", b, sizingChartFile(b))
	}
	fmt.Fprintf(sb, "**Holding locks.** The same Client then obtains %d locks (TTL %v, so the watchdog\n"+
		"renews each every %v) and holds them for %d renewal intervals: the CPU that costs, per\n"+
		"second of holding and per 10,000 locks, and the client's Go heap per held lock. Etcd's and\n"+
		"ZooKeeper's locks live on their session, but the watchdog still checks each one at its\n"+
		"renewal (etcd: a read of its key, batched in transactions; ZooKeeper: its node's state).\n"+
		"The heap is this whole process's; \"–\" where it shrank.\n\n",
		r.cfg.watchdogLocks, sizingHoldTTL, sizingHoldTTL/3, r.cfg.watchdogIntervals)
	var held [][]string
	for _, row := range r.sizing {
		h := row.held
		if h == nil {
			continue
		}
		if h.err != nil {
			held = append(held, []string{row.target.backend, row.target.label, "–", "–", "–", "–", "failed: " + oneLine(h.err)})
			continue
		}
		per10k := func(d time.Duration) string {
			return fmt.Sprintf("%.1f ms/s", float64(d)/1e6/h.held.Seconds()*10000/float64(h.locks))
		}
		server := "–"
		if h.serverCPU > 0 {
			server = per10k(h.serverCPU)
		}
		heap := "–" // the process freed more than the locks took: the figure would say nothing
		if h.heapPerLock > 0 {
			heap = fmt.Sprintf("%.0f B", h.heapPerLock)
		}
		held = append(held, []string{row.target.backend, row.target.label, fmt.Sprintf("%d in %v", h.locks, h.obtained.Round(time.Millisecond)),
			per10k(h.clientCPU), server, heap, strconv.Itoa(h.lost)})
	}
	table(sb, []string{"backend", "deployment", "locks obtained", "client CPU per 10,000 locks", "server CPU per 10,000 locks", "Go heap per lock", "lost"}, held)
	sb.WriteString("Deployments:\n\n")
	for _, row := range r.sizing {
		fmt.Fprintf(sb, "- %s, %s: %s\n", row.target.backend, row.target.label, row.target.note)
	}
	sb.WriteString("\n")
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// sizingBackends lists the backends of rows, in their order.
func sizingBackends(rows []sizingRow) []string {
	var out []string
	for _, row := range rows {
		if len(out) == 0 || out[len(out)-1] != row.target.backend {
			out = append(out, row.target.backend)
		}
	}
	return out
}

// sizingChartFile is the file, beside the docs, of backend's chart.
func sizingChartFile(backend string) string {
	return "sizing-" + strings.ToLower(backend) + ".svg"
}

// writeCharts writes the sizing scenario's charts into dir.
func (r *report) writeCharts(dir string) error {
	for _, b := range sizingBackends(r.sizing) {
		var series []chartSeries
		for _, row := range r.sizing {
			if row.target.backend != b || row.err != nil {
				continue
			}
			s := chartSeries{name: row.target.label}
			for _, p := range row.points {
				s.x = append(s.x, float64(p.callers))
				s.rate = append(s.rate, p.perSec)
				s.p99 = append(s.p99, float64(p.p99)/1e6)
			}
			series = append(series, s)
		}
		svg := sizingChart(b, series)
		if err := os.WriteFile(filepath.Join(dir, sizingChartFile(b)), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// chartSeries is one deployment's line: x the callers, rate cycles/s, p99 in ms.
type chartSeries struct {
	name         string
	x, rate, p99 []float64
}

// chartColors tell the series apart.
var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"}

// sizingChart draws two panels side by side, cycles/s and p99 against callers (a log2 axis),
// one line per series, as a standalone SVG.
func sizingChart(title string, series []chartSeries) string {
	const w, h, panelW, top, left, bottom = 880, 370, 380, 50, 60, 80
	var sb strings.Builder
	fmt.Fprintf(&sb, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&sb, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&sb, `<text x="%d" y="20" font-size="15" font-weight="bold">%s: fencelock cycles (TryObtain + Release) against concurrent callers</text>`+"\n", left, xmlEscape(title))
	panels := []struct {
		label string
		y     func(s chartSeries) []float64
	}{
		{"cycles/s", func(s chartSeries) []float64 { return s.rate }},
		{"p99, ms", func(s chartSeries) []float64 { return s.p99 }},
	}
	for i, p := range panels {
		x0 := left + i*(panelW+left)
		plotH := h - top - bottom
		var xmax, ymax float64 = 1, 0
		for _, s := range series {
			for k := range s.x {
				xmax = math.Max(xmax, s.x[k])
				ymax = math.Max(ymax, p.y(s)[k])
			}
		}
		ymax = niceCeil(ymax)
		lx := func(v float64) float64 {
			return float64(x0) + math.Log2(math.Max(v, 1))/math.Max(math.Log2(xmax), 1)*float64(panelW)
		}
		ly := func(v float64) float64 { return float64(top+plotH) - v/ymax*float64(plotH) }
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>`+"\n", x0, top, panelW, plotH)
		fmt.Fprintf(&sb, `<text x="%d" y="%d">%s</text>`+"\n", x0, top-8, p.label)
		for k := 0; k <= 4; k++ {
			v := ymax * float64(k) / 4
			fmt.Fprintf(&sb, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", x0, x0+panelW, ly(v), ly(v))
			fmt.Fprintf(&sb, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, ly(v)+4, axisLabel(v))
		}
		for c := 1.0; c <= xmax; c *= 2 {
			fmt.Fprintf(&sb, `<text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n", lx(c), top+plotH+16, c)
		}
		fmt.Fprintf(&sb, `<text x="%d" y="%d" text-anchor="middle">callers</text>`+"\n", x0+panelW/2, top+plotH+34)
		for j, s := range series {
			color := chartColors[j%len(chartColors)]
			var pts []string
			for k := range s.x {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", lx(s.x[k]), ly(p.y(s)[k])))
			}
			fmt.Fprintf(&sb, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			for _, pt := range pts {
				xy := strings.Split(pt, ",")
				fmt.Fprintf(&sb, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], color)
			}
		}
	}
	for j, s := range series {
		y := h - 12
		x := left + j*220
		fmt.Fprintf(&sb, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, y-10, chartColors[j%len(chartColors)], x+16, y, xmlEscape(s.name))
	}
	sb.WriteString("</svg>\n")
	return sb.String()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, for an axis's top.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// axisLabel writes an axis value briefly: 12k, 1.5, 250.
func axisLabel(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 10 || v == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return strconv.FormatFloat(v, 'g', 2, 64)
	}
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}
