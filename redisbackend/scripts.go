package redisbackend

import (
	_ "embed"
	"fmt"

	"github.com/fencelock/fencelock/internal/redislayer"
	"github.com/fencelock/fencelock/redisconn"
)

var (
	//go:embed lock.lua
	lockSrc string
	//go:embed take.lua
	takeSrc string
	//go:embed reenter.lua
	reenterSrc string
	//go:embed handover.lua
	handoverSrc string
	//go:embed acquire.lua
	acquireBody string
	//go:embed acquire_held.lua
	acquireHeldBody string
	//go:embed queue.lua
	queueBody string
	//go:embed leave.lua
	leaveSrc string
	//go:embed renew.lua
	renewSrc string
	//go:embed release.lua
	releaseBody string
	//go:embed release_hash.lua
	releaseHashBody string
	//go:embed inspect.lua
	inspectSrc string
	//go:embed force.lua
	forceBody string
	//go:embed publish.lua
	publishBody string
	//go:embed line.lua
	lineSrc string
	//go:embed sem.lua
	semSrc string
	//go:embed sem_acquire.lua
	semAcquireBody string
	//go:embed sem_renew.lua
	semRenewBody string
	//go:embed sem_release.lua
	semReleaseBody string
	//go:embed sem_inspect.lua
	semInspectBody string
	//go:embed sem_leave.lua
	semLeaveSrc string

	// The scripts that read a lock share the functions of lock.lua, which reads both of its
	// forms; those that give a lock to an owner, take.lua, reenter.lua and handover.lua; and
	// those that free one, announce.lua of internal/redislayer. Each script gets only the
	// fragments it calls, since a script defines its functions anew on every call. The two
	// scripts every lock runs go further: each opens with its usual case and the fragments
	// that case calls, and returns there; the fragments of its other cases are defined after
	// it, before the body of those cases (acquire_held.lua, release_hash.lua).
	acquireSrc    = takeSrc + acquireBody + lockSrc + reenterSrc + acquireHeldBody
	releaseSrc    = redislayer.AnnounceLua + releaseBody + lockSrc + takeSrc + handoverSrc + releaseHashBody
	queueScript   = redisconn.NewScript(lockSrc + takeSrc + reenterSrc + queueBody)
	leaveScript   = redisconn.NewScript(leaveSrc)
	renewScript   = redisconn.NewScript(lockSrc + renewSrc)
	inspectScript = redisconn.NewScript(lockSrc + inspectSrc)
	forceScript   = redisconn.NewScript(redislayer.AnnounceLua + lockSrc + takeSrc + handoverSrc + forceBody)
	publishScript = redisconn.NewScript(redislayer.AnnounceLua + lockSrc + publishBody)
	lineScript    = redisconn.NewScript(lineSrc)

	// The semaphore's scripts share sem.lua; those that issue tokens, take.lua's next_token.
	semAcquireScript = redisconn.NewScript(takeSrc + semSrc + semAcquireBody)
	semRenewScript   = redisconn.NewScript(semSrc + semRenewBody)
	semReleaseScript = redisconn.NewScript(redislayer.AnnounceLua + takeSrc + semSrc + semReleaseBody)
	semInspectScript = redisconn.NewScript(semSrc + semInspectBody)
	semLeaveScript   = redisconn.NewScript(takeSrc + semSrc + semLeaveSrc)
)

// cycleScripts are the two scripts every lock cycle runs, acquire.lua and release.lua, for one
// Backend: they take the Backend's settings — how a release is announced, the fence
// retention, WithPlainLocks — as constants in their source, HOW, RETENTION and HASH, rather
// than as arguments. Every argument of a call costs the server about 1.3k instructions (a
// string, and a slot in KEYS or ARGV), and these never change from call to call: a Client's
// TryObtain and Release of a fresh name cost redis-server 7.0.15 116.9k instructions with
// them as arguments and 110.3k without (callgrind, 1,000 cycles). A few settings give a few
// scripts in the server's cache. The scripts off the usual cycle take them as arguments.
type cycleScripts struct {
	acquire, release *redisconn.Script
}

// newCycleScripts returns the cycle's scripts with announce (redislayer.Announce), the fence
// retention in ms and the lock's form ("hash" for WithPlainLocks(false)).
func newCycleScripts(announce string, retention int64, form string) cycleScripts {
	settings := fmt.Sprintf("local HOW, RETENTION, HASH = '%s', %d, %t\n", announce, retention, form == "hash")
	return cycleScripts{
		acquire: redisconn.NewScript(settings + acquireSrc),
		release: redisconn.NewScript(settings + releaseSrc),
	}
}
