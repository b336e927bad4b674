package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/internal/testserver"
)

// Each way of getting the backend URL wrong gets one line that says what went wrong and what to
// write instead, with the exit code of bad input; only a backend that does not answer is exit
// code 125. Against real servers: one without a password, one with.
func TestBackendURLMessages(t *testing.T) {
	open, locked := testserver.StartRedis(t), testserver.StartRedis(t)
	// Set once it runs: the test server's readiness check pings without a password.
	if err := locked.ClientT(t).ConfigSet(context.Background(), "requirepass", "sekrit").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		what, url string
		code      int
		says      []string // each in the one line of stderr
	}{
		{"no scheme", open.Addr, exitUsage, []string{"has no scheme", "write redis://" + open.Addr}},
		{"no host", "etcd://", exitUsage, []string{"backend URL etcd://:", "want etcd://host:port"}},
		{"port out of range", "redis://127.0.0.1:99999", exitUsage, []string{`port "99999"`, "1 to 65535"}},
		{"no such database", "redis://" + open.Addr + "/99", exitUsage, []string{"no such database", "databases setting"}},
		{"password missing", "redis://" + locked.Addr, exitUsage, []string{"authentication failed", "wants a password", "redis://:PASSWORD@host:port"}},
		{"password wrong", "redis://:wrong@" + locked.Addr, exitUsage, []string{"authentication failed", "check the user and password"}},
		{"nothing listens", "redis://127.0.0.1:1", exitFailure, []string{"does not answer", "connection refused"}},
		{"etcd: nothing listens", "etcd://127.0.0.1:1", exitFailure, []string{"does not answer", "connection refused"}},
	} {
		res := cli(t, 30*time.Second, nil, "--backend", tc.url, "status", "x")
		line := strings.TrimSpace(res.stderr)
		ok := res.code == tc.code && !strings.Contains(line, "\n") && !strings.Contains(line, "wrong@") && !strings.Contains(line, "sekrit")
		for _, s := range tc.says {
			ok = ok && strings.Contains(line, s)
		}
		if !ok {
			t.Errorf("%s (%s): code %d, want %d; stderr %q, want one line with %q", tc.what, tc.url, res.code, tc.code, res.stderr, tc.says)
		}
	}
	if res := cli(t, 30*time.Second, nil, "--backend", "redis://:sekrit@"+locked.Addr, "status", "x"); res.code != 0 || res.stderr != "" {
		t.Errorf("the right password: code %d, stderr %q", res.code, res.stderr)
	}
	// A Cluster's password, in the form the help gives: redis+cluster://PASSWORD@host:port. It
	// was read as a user name, and no password was sent.
	cluster := testserver.StartCluster(t, 3)
	for _, node := range cluster.Nodes {
		c := node.Client()
		err := c.ConfigSet(context.Background(), "requirepass", "sekrit").Err()
		_ = c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	if res := cli(t, 30*time.Second, nil, "--backend", "redis+cluster://sekrit@"+cluster.Addrs[0], "status", "x"); res.code != 0 || res.stderr != "" {
		t.Errorf("a Cluster's password in the form the help gives: code %d, stderr %q", res.code, res.stderr)
	}
	// With --json, the error is JSON on stdout, and stderr stays empty.
	res := cli(t, 30*time.Second, nil, "--backend", "redis://127.0.0.1:1", "status", "--json", "x")
	var out struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || res.code != exitFailure || out.ExitCode != exitFailure || !strings.Contains(out.Error, "does not answer") || res.stderr != "" {
		t.Errorf("--json error: code %d, stdout %q (%v), stderr %q", res.code, res.stdout, err, res.stderr)
	}
	// A password the server does not want works, with a warning: the URL may name the wrong
	// server. (go-redis logs in without a word.)
	if res := cli(t, 30*time.Second, nil, "--backend", "redis://:extra@"+open.Addr, "status", "x"); res.code != 0 || !strings.Contains(res.stderr, "needs no password, but the URL has one") || strings.Contains(res.stderr, "extra") {
		t.Errorf("a password the server does not want: code %d, stderr %q", res.code, res.stderr)
	}
}
