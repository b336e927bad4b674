package main

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"
)

// facts describe the machine and the software of a run.
type facts struct {
	date       time.Time
	cpus       int // online CPUs
	cpuModel   string
	kernel     string
	goVersion  string
	gomaxprocs int
	redis      string
	pinning    string
	ping       time.Duration // PING round trip p50 to a server
	loadStart  string
	loadEnd    string
	elapsed    time.Duration
	modules    []string // "path version" of the peers and go-redis
}

func gatherFacts() facts {
	f := facts{date: time.Now().UTC(), goVersion: runtime.Version(), cpus: onlineCPUs(), loadStart: loadAvg()}
	f.cpuModel = cpuModel()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		f.kernel = unix.ByteSliceToString(u.Sysname[:]) + " " + unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Machine[:])
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			switch {
			case strings.HasPrefix(m.Path, "github.com/bsm/redislock"),
				strings.HasPrefix(m.Path, "github.com/go-redsync/redsync"),
				m.Path == "github.com/redis/rueidis",
				m.Path == "github.com/redis/go-redis/v9",
				m.Path == "github.com/zeromicro/go-zero":
				v := m.Version
				if m.Replace != nil {
					v = m.Replace.Version
				}
				f.modules = append(f.modules, m.Path+" "+v)
			}
		}
	}
	return f
}

// finish records what can only be known at the end of the run.
func (f *facts) finish() {
	f.gomaxprocs = runtime.GOMAXPROCS(0)
	f.loadEnd = loadAvg()
	f.elapsed = time.Since(f.date).Round(time.Second)
}

// onlineCPUs counts the machine's CPUs, whatever this process's affinity is (nproc --all).
func onlineCPUs() int {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "processor") {
			n++
		}
	}
	return max(n, 1)
}

func cpuModel() string {
	fh, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	defer fh.Close()
	s := bufio.NewScanner(fh)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	fields := strings.Fields(string(b))
	if len(fields) < 3 {
		return "?"
	}
	return strings.Join(fields[:3], " ")
}

func redisVersion(ctx context.Context, c *redis.Client) string {
	text, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	v, _ := infoText(text, "redis_version")
	return v
}

// docsPath is the file -write-docs writes: path if given, else docs/PERFORMANCE.md at the
// root of the fencelock checkout holding the working directory (the directory whose go.mod
// is module github.com/fencelock/fencelock).
func docsPath(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), "module github.com/fencelock/fencelock\n") {
			return filepath.Join(dir, "docs", "PERFORMANCE.md"), os.MkdirAll(filepath.Join(dir, "docs"), 0o755)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("-write-docs: no fencelock checkout above the working directory; give -docs")
		}
		dir = parent
	}
}
