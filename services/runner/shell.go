package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// pipeWaitDelay bounds how long core.shell waits, once its process group is
// gone, for the output pipes to reach EOF. Only a process that escaped the
// group (setsid, setpgid) and still holds the pipes makes that wait long.
const pipeWaitDelay = time.Second

// shellRunner is core.shell; its contract is in the package doc.
type shellRunner struct {
	maxOutput int
	grace     time.Duration
	baseEnv   map[string]string
	allowed   []string
}

type shellInput struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	Dir     string            `json:"dir"`
}

type shellResult struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	Signal          string `json:"signal,omitempty"`
}

// decodeShell decodes and validates core.shell's input.
func decodeShell(input []byte) (shellInput, error) {
	var in shellInput
	if err := decodeStrict(input, &in, "command", "args", "env", "dir"); err != nil {
		return in, err
	}
	switch {
	case in.Command == "":
		return in, errors.New(`"command" is required`)
	case strings.ContainsRune(in.Command, 0):
		return in, errors.New(`"command" contains NUL`)
	case !filepath.IsAbs(in.Command) && strings.ContainsRune(in.Command, '/'):
		return in, fmt.Errorf(`"command" %q must be an absolute path or a bare name`, in.Command)
	case in.Command == "." || in.Command == "..":
		return in, fmt.Errorf(`"command" %q is not a program`, in.Command)
	}
	for i, a := range in.Args {
		if strings.ContainsRune(a, 0) {
			return in, fmt.Errorf(`"args"[%d] contains NUL`, i)
		}
	}
	for k, v := range in.Env {
		if err := checkEnvVar(k, v); err != nil {
			return in, fmt.Errorf(`"env": %w`, err)
		}
	}
	if p, ok := in.Env["PATH"]; ok && p == "" {
		return in, errors.New(`"env": PATH must not be empty`)
	}
	if in.Dir != "" && (!filepath.IsAbs(in.Dir) || strings.ContainsRune(in.Dir, 0)) {
		return in, fmt.Errorf(`"dir" %q must be an absolute path`, in.Dir)
	}
	return in, nil
}

// prepare resolves the program to run and builds its environment, sorted.
func (r *shellRunner) prepare(in shellInput) (path string, env []string, f *Failure) {
	vars := make(map[string]string, len(r.baseEnv)+len(in.Env))
	for k, v := range r.baseEnv {
		vars[k] = v
	}
	for k, v := range in.Env {
		vars[k] = v
	}
	env = make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)

	if filepath.IsAbs(in.Command) {
		path = filepath.Clean(in.Command)
	} else {
		var err error
		if path, err = lookPath(in.Command, vars["PATH"]); err != nil {
			return "", nil, failf(nil, "core.shell: %w", err)
		}
	}
	if len(r.allowed) > 0 && !slices.Contains(r.allowed, path) {
		return "", nil, failf(nil, "core.shell: command %q is not in the allowed commands", path)
	}
	return path, env, nil
}

// lookPath finds an executable regular file named name in the absolute
// directories of pathList (relative and empty entries are skipped, so the
// working directory is never searched implicitly).
func lookPath(name, pathList string) (string, error) {
	for _, dir := range filepath.SplitList(pathList) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH %q", name, pathList)
}
