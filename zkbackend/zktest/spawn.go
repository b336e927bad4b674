package zktest

import (
	"os/exec"
	"runtime"
	"sync"
)

// Linux sends Pdeathsig when the thread that forked the child exits, not the process
// (go.dev/issue/27505). Forking from one goroutine locked to its thread forever ties the
// server's life to the test binary's.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func spawn(cmd *exec.Cmd) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must outlive every child
			for r := range spawnReqs {
				r.done <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, done: make(chan error, 1)}
	spawnReqs <- r
	return <-r.done
}
