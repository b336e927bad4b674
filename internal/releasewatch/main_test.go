package releasewatch_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fencelock/fencelock/internal/testmain"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // go-redis reports each lost pub/sub connection on stderr
	testmain.Run(m, nil)
}
