package releasewatch_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis reports each lost pub/sub connection on stderr
	code := m.Run()
	if code == 0 {
		// testserver keeps one OS thread per server process: the parent-death signal that
		// kills servers with the test binary is tied to the thread that started them.
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/fencelock/fencelock/internal/testserver.spawn.func1.1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
