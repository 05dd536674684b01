//go:build linux

package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
	"unsafe"
)

// Run fails: with no runner_config there is no program to run.
func (r *shellRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	return r.RunConfigured(ctx, nil, input)
}

// RunConfigured runs the program config names, with the arguments input
// may add; the contract is in the package doc.
func (r *shellRunner) RunConfigured(ctx context.Context, config, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameShell)
	}
	in, f := plan(config, input)
	if f != nil {
		return nil, f
	}
	path, env, f := r.prepare(in)
	if f != nil {
		return nil, f
	}

	stdout, stderr := newBoundedBuffer(r.maxOutput), newBoundedBuffer(r.maxOutput)
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u := r.cred; u != nil {
		attr.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: u.groups}
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{in.command}, in.args...),
		Env:         env, // never nil: it holds at least PATH
		Dir:         in.dir,
		Stdout:      stdout,
		Stderr:      stderr,
		SysProcAttr: attr,
		WaitDelay:   pipeWaitDelay,
	}
	if err := cmd.Start(); err != nil {
		return nil, failf(nil, "core.shell: cannot start %q: %w", path, err)
	}
	pid := cmd.Process.Pid

	// exited closes when the main process has exited. It is not reaped until
	// cmd.Wait below, so until then its pid, which is also the process group
	// id, cannot be reused and signalling -pid reaches only our group.
	exited := make(chan struct{})
	var waitidErr error // set before exited closes
	go func() {
		defer close(exited)
		waitidErr = waitExitedNoReap(pid)
	}()

	var stopped string // how the run was stopped because ctx ended; "" if it was not
	select {
	case <-exited:
	case <-ctx.Done():
		select {
		case <-exited: // finished anyway: report the real outcome
		default:
			_ = syscall.Kill(-pid, syscall.SIGINT)
			stopped = "sent SIGINT"
			t := time.NewTimer(r.grace)
			select {
			case <-exited:
				t.Stop()
			case <-t.C:
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				stopped = fmt.Sprintf("sent SIGINT, then SIGKILL after %s", r.grace)
				<-exited
			}
		}
	}
	// Whatever the main process left behind in its group goes too. (If waitid
	// failed, as when the process ignores SIGCHLD and children are reaped
	// automatically, the group id may no longer be ours: leave it alone.)
	if waitidErr == nil {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	waitErr := cmd.Wait()

	state := cmd.ProcessState
	if state == nil {
		return nil, failf(nil, "core.shell: wait for %q: %w", path, waitErr)
	}
	res := shellResult{ExitCode: state.ExitCode()}
	res.Stdout, res.StdoutTruncated = stdout.text()
	res.Stderr, res.StderrTruncated = stderr.text()
	ws, _ := state.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		res.Signal = signalName(ws.Signal())
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, failf(nil, "core.shell: encode result: %w", err)
	}

	switch {
	case stopped != "":
		return nil, &Interrupted{Err: fmt.Errorf("core.shell: %s to the process group: %w", stopped, ctx.Err()), Result: raw}
	case res.Signal != "":
		return nil, failf(raw, "core.shell: command %q killed by signal %s", in.command, res.Signal)
	case res.ExitCode != 0:
		return nil, failf(raw, "core.shell: command %q exited with status %d", in.command, res.ExitCode)
	case waitErr != nil && !errors.Is(waitErr, exec.ErrWaitDelay):
		return nil, failf(raw, "core.shell: wait for %q: %w", in.command, waitErr)
	}
	return raw, nil
}

// waitExitedNoReap blocks until process pid has exited, leaving it waitable
// (a zombie) for cmd.Wait to reap. An error (ECHILD) means pid cannot be
// waited for, so nothing is known about it.
func waitExitedNoReap(pid int) error {
	const pPID = 1      // P_PID from <sys/wait.h>
	var info [16]uint64 // siginfo_t: 128 bytes, 8-aligned
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid),
			uintptr(unsafe.Pointer(&info)), syscall.WEXITED|syscall.WNOWAIT, 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.EINTR:
			continue
		default:
			return fmt.Errorf("waitid %d: %w", pid, errno)
		}
	}
}

// signalName returns the conventional name of s ("SIGKILL").
func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGABRT: "SIGABRT", syscall.SIGALRM: "SIGALRM", syscall.SIGBUS: "SIGBUS",
		syscall.SIGFPE: "SIGFPE", syscall.SIGHUP: "SIGHUP", syscall.SIGILL: "SIGILL",
		syscall.SIGINT: "SIGINT", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
		syscall.SIGQUIT: "SIGQUIT", syscall.SIGSEGV: "SIGSEGV", syscall.SIGTERM: "SIGTERM",
		syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2", syscall.SIGXCPU: "SIGXCPU",
		syscall.SIGXFSZ: "SIGXFSZ", syscall.SIGSYS: "SIGSYS", syscall.SIGTRAP: "SIGTRAP",
	}
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("signal %d", int(s))
}
