package zktest

import (
	"net"
	"strings"
	"testing"
	"time"
)

// A paused and resumed server stops promptly, and restarts on its port.
func TestLifecycle(t *testing.T) {
	s := Start(t)
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
	s := Start(t)
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
