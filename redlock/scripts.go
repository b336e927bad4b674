package redlock

import (
	_ "embed"

	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
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

	acquireScript = redisconn.NewScript(acquireSrc)
	fenceScript   = redisconn.NewScript(fenceSrc)
	recordScript  = redisconn.NewScript(recordSrc)
	renewScript   = redisconn.NewScript(renewSrc)
	retakeScript  = redisconn.NewScript(retakeSrc)
	releaseScript = redisconn.NewScript(redislayer.AnnounceLua + releaseSrc)
	dropScript    = redisconn.NewScript(redislayer.AnnounceLua + dropSrc)
	inspectScript = redisconn.NewScript(inspectSrc)
)
