package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencelock/fencelock/fence"
)

// A name moved from Redis to etcd: the fenced store that accepted Redis's tokens (its clock in
// microseconds) refuses every write of the first etcd holder (a revision), until the etcd
// backend's URL carries a token base above them; from then on etcd's tokens go on above
// Redis's.
func TestMoveToAnotherBackendWithATokenBase(t *testing.T) {
	_, redisEnvs := redisEnv(t)
	etcd, err := startEmbeddedEtcd()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.close()
	var store fence.Memory
	// token runs `fencelock run job` on the backend of env and returns its command's token.
	token := func(env ...string) int64 {
		t.Helper()
		res := cli(t, 30*time.Second, env, "run", "--ttl", "2s", "job", "--", "sh", "-c", `echo "$FENCELOCK_TOKEN"`)
		n, err := strconv.ParseInt(strings.TrimSpace(res.stdout), 10, 64)
		if res.code != 0 || err != nil {
			t.Fatalf("run: code %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		return n
	}
	write := func(tok int64) error { return store.Do("job", tok, func() error { return nil }) }

	onRedis := token(redisEnvs...)
	if err := write(onRedis); err != nil {
		t.Fatal(err)
	}
	onEtcd := token("FENCELOCK_BACKEND=" + etcd.url)
	var stale *fence.StaleError
	if err := write(onEtcd); !errors.As(err, &stale) {
		t.Fatalf("etcd's token %d after Redis's %d: the fenced store said %v; want it refused as stale", onEtcd, onRedis, err)
	}
	base := store.Latest("job")
	based := token("FENCELOCK_BACKEND=" + etcd.url + "?token_base=" + strconv.FormatInt(base, 10))
	if based <= onRedis || based-base <= onEtcd {
		t.Fatalf("etcd's token with base %d: %d; want above Redis's %d and the base plus a revision above %d", base, based, onRedis, onEtcd)
	}
	if err := write(based); err != nil {
		t.Fatalf("etcd's token %d with base %d: %v", based, base, err)
	}
	if again := token("FENCELOCK_BACKEND=" + etcd.url + "?token_base=" + strconv.FormatInt(base, 10)); write(again) != nil || again <= based {
		t.Fatalf("the next etcd holder's token %d, after %d: want it above, and accepted", again, based)
	}

	for _, bad := range []string{"-1", "x", "4611686018427387905"} {
		res := cli(t, 30*time.Second, []string{"FENCELOCK_BACKEND=" + etcd.url + "?token_base=" + bad}, "status", "job")
		if res.code != exitUsage || !strings.Contains(res.stderr, "token_base") || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
			t.Errorf("token_base=%s: code %d, stderr %q; want a usage error of one line", bad, res.code, res.stderr)
		}
	}
}
