package testserver

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// TestFlavorStartsThatServer checks that FlavorEnv chooses the binary: INFO names the server
// (Valkey answers server_name:valkey; Redis 7.0 has no such field).
func TestFlavorStartsThatServer(t *testing.T) {
	for _, tc := range []struct{ env, serverName string }{{"redis", ""}, {"valkey", "valkey"}} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(FlavorEnv, tc.env)
			r, err := NewRedis()
			if errors.Is(err, ErrNotInstalled) {
				t.Skipf("%v", err)
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Close() })
			info, err := r.ClientT(t).Info(context.Background(), "server").Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := infoField(info, "server_name"); got != tc.serverName {
				t.Fatalf("%s=%s started a server whose INFO has server_name:%q, want %q", FlavorEnv, tc.env, got, tc.serverName)
			}
		})
	}
}

func TestFlavorBadValue(t *testing.T) {
	t.Setenv(FlavorEnv, "keydb")
	_, err := NewRedis()
	if err == nil || !strings.Contains(err.Error(), FlavorEnv) {
		t.Fatalf("NewRedis with %s=keydb = %v, want an error naming the variable", FlavorEnv, err)
	}
}
