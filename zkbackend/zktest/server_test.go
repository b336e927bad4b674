package zktest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

// A paused and resumed server stops promptly, and restarts on its port.
func TestLifecycle(t *testing.T) {
	s := Start(t, Options{})
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= stopGrace {
		t.Errorf("stopping took %v: SIGTERM was not enough", took)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.FourLetter("srvr"); err != nil || !strings.Contains(out, "Mode: standalone") {
		t.Fatalf("after restart: %q %v", out, err)
	}
}

// A server whose port something else took while it was down starts again once the port is
// free, within Restart.
func TestRestartWaitsForItsPort(t *testing.T) {
	s := Start(t, Options{})
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		taken.Close()
	}()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.FourLetter("srvr"); err != nil || !strings.Contains(out, "Mode: standalone") {
		t.Fatalf("after restart: %q %v", out, err)
	}
}

// Options reach the server: Fsync its zoo.cfg, CPU the affinity of every thread of its JVM.
func TestOptions(t *testing.T) {
	s := Start(t, Options{Fsync: true, CPU: "0"})
	cfg, err := os.ReadFile(s.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "\nforceSync=yes\n") {
		t.Errorf("zoo.cfg with Fsync:\n%s", cfg)
	}
	threads, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", s.PID()))
	if err != nil || len(threads) < 2 {
		t.Fatalf("threads of the JVM: %v %v", threads, err)
	}
	for _, th := range threads {
		b, err := os.ReadFile(th)
		if err != nil {
			continue // the thread ended
		}
		if !strings.Contains(string(b), "Cpus_allowed_list:\t0\n") {
			t.Errorf("%s is not pinned to CPU 0:\n%s", th, b)
			break
		}
	}
	plain := Start(t, Options{})
	if cfg, err := os.ReadFile(plain.cfgPath); err != nil || !strings.Contains(string(cfg), "\nforceSync=no\n") {
		t.Errorf("zoo.cfg without Fsync: %v\n%s", err, cfg)
	}
}

// An ensemble of 3 serves as one quorum: one leader, two followers; with its leader killed,
// the other two elect one of themselves.
func TestEnsemble(t *testing.T) {
	e, err := NewEnsemble(3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	modes := func(servers []*Server) (leaders, followers []*Server) {
		for _, s := range servers {
			out, _ := s.FourLetter("srvr")
			switch {
			case strings.Contains(out, "Mode: leader"):
				leaders = append(leaders, s)
			case strings.Contains(out, "Mode: follower"):
				followers = append(followers, s)
			}
		}
		return leaders, followers
	}
	leaders, followers := modes(e.Servers)
	if len(leaders) != 1 || len(followers) != 2 {
		t.Fatalf("%d leaders and %d followers, want 1 and 2", len(leaders), len(followers))
	}
	if err := leaders[0].Kill(); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 30*time.Second, "a leader among the two servers left", func() bool {
		l, f := modes(followers)
		return len(l) == 1 && len(f) == 1
	})
	if _, err := NewEnsemble(2, Options{}); err == nil {
		t.Error("an ensemble of 2 was started")
	}
}
