package redisbackend

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed force.lua
	forceSrc string

	acquireScript = redis.NewScript(acquireSrc)
	renewScript   = redis.NewScript(renewSrc)
	releaseScript = redis.NewScript(releaseSrc)
	inspectScript = redis.NewScript(inspectSrc)
	forceScript   = redis.NewScript(forceSrc)
)
