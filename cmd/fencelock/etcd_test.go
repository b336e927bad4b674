package main

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

// `fencelock etcd` serves a real etcd on loopback until it is stopped: it prints its URL, run
// takes a lock there, and SIGTERM ends it with code 0. A --listen off loopback is refused.
func TestEtcdCommandServesUntilStopped(t *testing.T) {
	port, err := testserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startRun(t, nil, "etcd", "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	want := fmt.Sprintf("etcd://127.0.0.1:%d", port)
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(p.out.String(), want); time.Sleep(20 * time.Millisecond) {
		select {
		case code := <-p.done:
			t.Fatalf("fencelock etcd exited with %d before printing its URL; stderr %q", code, p.errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fencelock etcd printed %q in 30s, want %q; stderr %q", p.out.String(), want, p.errb.String())
		}
	}
	res := cli(t, 30*time.Second, []string{"FENCELOCK_BACKEND=" + want}, "run", "job", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"`)
	if tok, err := strconv.ParseInt(strings.TrimSpace(res.stdout), 10, 64); res.code != 0 || err != nil || tok <= 0 {
		t.Fatalf("run on the served etcd: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if code := p.wait(t); code != 0 {
		t.Fatalf("fencelock etcd exited with %d after SIGTERM; stderr %q", code, p.errb.String())
	}

	for _, listen := range []string{"0.0.0.0:2379", "10.0.0.1:2379", "localhost"} {
		res := cli(t, 30*time.Second, nil, "etcd", "--listen", listen)
		if res.code != exitUsage || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("--listen %s: code %d, stderr %q; want a usage error of one line", listen, res.code, res.stderr)
		}
	}
}
