package main

import (
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// terminal is run's controlling terminal, for job control: the command's process group is the
// terminal's foreground group while it runs and run has the terminal, as a shell does with a
// job, so that the command can read the terminal (rather than stop on SIGTTIN) and Ctrl-C and
// Ctrl-Z reach it.
type terminal struct {
	f    *os.File
	pgrp int // run's own process group
}

// openTerminal opens run's controlling terminal, or returns nil when it has none.
func openTerminal() *terminal {
	f, err := os.OpenFile("/dev/tty", os.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	return &terminal{f: f, pgrp: syscall.Getpgrp()}
}

func (t *terminal) close() {
	if t != nil {
		_ = t.f.Close()
	}
}

func (t *terminal) fd() int { return int(t.f.Fd()) }

// foreground reports whether pgrp is the terminal's foreground process group.
func (t *terminal) foreground(pgrp int) bool {
	fg, err := unix.IoctlGetInt(t.fd(), unix.TIOCGPGRP)
	return err == nil && fg == pgrp
}

// give makes pgrp the terminal's foreground group. A process outside the foreground group
// that does so gets SIGTTOU unless it blocks the signal; the mask is per thread, so the
// call runs on a locked thread with SIGTTOU blocked, which also leaves the command's signal
// dispositions alone.
func (t *terminal) give(pgrp int) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var set, old unix.Sigset_t
	set.Val[(syscall.SIGTTOU-1)/64] |= 1 << ((uint(syscall.SIGTTOU) - 1) % 64)
	if err := unix.PthreadSigmask(unix.SIG_BLOCK, &set, &old); err != nil {
		return
	}
	_ = unix.IoctlSetPointerInt(t.fd(), unix.TIOCSPGRP, pgrp)
	_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
}
