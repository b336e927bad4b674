package main

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// command is what run starts: the program's path, its argv and its environment.
type command struct {
	path string
	argv []string
	env  []string
}

// processes are the command and every process it started, directly or not: the command leads
// a process group of its own, and run is the subreaper of them all, so that every one of them
// that outlives its parent becomes run's child and run can wait until none is left. Their wait
// statuses arrive on events; events closes when run has no child left.
type processes struct {
	pid    int // the command; also its process group's ID
	events chan waitEvent
}

type waitEvent struct {
	pid    int
	status syscall.WaitStatus
}

// forkThread runs the fork on one goroutine locked to its OS thread for good: Linux sends the
// Pdeathsig when the thread that forked the child ends, not the process
// (go.dev/issue/27505), and a Go thread may end while its process goes on.
var (
	forkOnce   sync.Once
	forkThread chan func()
)

func onForkThread(fn func()) {
	forkOnce.Do(func() {
		forkThread = make(chan func())
		go func() {
			runtime.LockOSThread()
			// Never unlocked and never returns: the thread must live as long as run.
			for fn := range forkThread {
				fn()
			}
		}()
	})
	done := make(chan struct{})
	forkThread <- func() {
		defer close(done)
		fn()
	}
	<-done
}

// start starts c, in the terminal's foreground when fg holds the terminal's descriptor
// (fg < 0: leave the foreground alone).
func start(c command, fg int) (*processes, error) {
	// Orphans of the command become run's children rather than init's.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, os.NewSyscallError("prctl(PR_SET_CHILD_SUBREAPER)", err)
	}
	attr := &os.ProcAttr{
		Env:   c.env,
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr},
		Sys: &syscall.SysProcAttr{
			Setpgid:    true,
			Foreground: fg >= 0,
			Ctty:       fg,
			// A run killed without a chance to clean up (SIGKILL) takes the command along.
			Pdeathsig: syscall.SIGKILL,
		},
	}
	var p *os.Process
	var err error
	onForkThread(func() { p, err = os.StartProcess(c.path, c.argv, attr) })
	if err != nil {
		return nil, err
	}
	pid := p.Pid
	_ = p.Release() // run reaps its children itself, with wait4(-1)
	ps := &processes{pid: pid, events: make(chan waitEvent, 16)}
	go ps.reap()
	return ps, nil
}

// reap reports the wait statuses of run's children: the command, and the orphans it left,
// which the kernel gives to run as their subreaper. A stop is reported too. When no child is
// left, no descendant of run's is alive: each one alive has a parent alive, up to a child of
// run's.
func (ps *processes) reap() {
	defer close(ps.events)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil: // ECHILD: none left
			return
		}
		ps.events <- waitEvent{pid: pid, status: ws}
	}
}

// signalGroup sends sig to the command's process group.
func (ps *processes) signalGroup(sig syscall.Signal) {
	_ = syscall.Kill(-ps.pid, sig)
}

// signalAll sends sig to the command's process group and to every other descendant of run's,
// such as one that made itself a session or group of its own.
func (ps *processes) signalAll(sig syscall.Signal) {
	ps.signalGroup(sig)
	for _, d := range descendants(os.Getpid()) {
		if d.pgrp != ps.pid {
			_ = syscall.Kill(d.pid, sig)
		}
	}
}

type procEntry struct{ pid, ppid, pgrp int }

// descendants lists the processes below root, read from /proc.
func descendants(root int) []procEntry {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]procEntry{}
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			children[p.ppid] = append(children[p.ppid], p)
		}
	}
	var out []procEntry
	queue := []int{root}
	for len(queue) > 0 {
		next := queue[0]
		queue = queue[1:]
		for _, c := range children[next] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readProc reads a process's parent and process group from /proc/PID/stat.
func readProc(pid int) (procEntry, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procEntry{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procEntry{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return procEntry{}, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return procEntry{}, false
	}
	return procEntry{pid: pid, ppid: ppid, pgrp: pgrp}, true
}
