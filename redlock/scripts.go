package redlock

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// One script per operation on one node; each file names its KEYS, ARGV and reply.
var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed fence.lua
	fenceSrc string
	//go:embed record.lua
	recordSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed retake.lua
	retakeSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed drop.lua
	dropSrc string
	//go:embed inspect.lua
	inspectSrc string

	acquireScript = redis.NewScript(acquireSrc)
	fenceScript   = redis.NewScript(fenceSrc)
	recordScript  = redis.NewScript(recordSrc)
	renewScript   = redis.NewScript(renewSrc)
	retakeScript  = redis.NewScript(retakeSrc)
	releaseScript = redis.NewScript(releaseSrc)
	dropScript    = redis.NewScript(dropSrc)
	inspectScript = redis.NewScript(inspectSrc)
)
