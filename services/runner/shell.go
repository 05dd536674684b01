package runner

import (
	"bytes"
	"encoding/json"
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
	cred      *shellUser // nil: the server's own user
}

// shellConfig is core.shell's runner_config: the program, fixed by the
// action's definition.
type shellConfig struct {
	Command   string            `json:"command"`
	Args      argList           `json:"args"`
	Env       map[string]string `json:"env"`
	Dir       string            `json:"dir"`
	InputArgs bool              `json:"input_args"`
}

// shellInput is what a request's input may hold: arguments to append, when
// the config's input_args allows. command, env and dir are decoded only to
// be refused with a clear message.
type shellInput struct {
	Command string            `json:"command"`
	Args    argList           `json:"args"`
	Env     map[string]string `json:"env"`
	Dir     string            `json:"dir"`
}

// argList is "args": an array of strings; a null element is refused (it
// would otherwise become an empty argument).
type argList []string

// UnmarshalJSON decodes an array of strings, refusing null elements.
func (a *argList) UnmarshalJSON(b []byte) error {
	var elems []*string
	if err := json.Unmarshal(b, &elems); err != nil {
		return errors.New(`"args" must be an array of strings`)
	}
	if elems == nil {
		*a = nil
		return nil
	}
	out := make(argList, len(elems))
	for i, e := range elems {
		if e == nil {
			return fmt.Errorf(`"args"[%d] is null: each argument must be a string`, i)
		}
		out[i] = *e
	}
	*a = out
	return nil
}

type shellResult struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	Signal          string `json:"signal,omitempty"`
}

// errShellNoConfig is the failure of a core.shell run whose action
// defines no runner_config.
var errShellNoConfig = errors.New(`core.shell: the action defines no runner_config, so there is no program to run: ` +
	`the program is fixed by the action's definition (runner_config {"command": "/abs/path", "args": [...], "input_args": true}), ` +
	`never chosen by a request's input`)

// decodeShellConfig decodes and validates core.shell's runner_config.
func decodeShellConfig(config []byte) (shellConfig, error) {
	var c shellConfig
	if err := decodeStrict(config, &c, "command", "args", "env", "dir", "input_args"); err != nil {
		return c, fmt.Errorf("core.shell runner_config: %w", err)
	}
	if err := c.check(); err != nil {
		return c, fmt.Errorf("core.shell runner_config: %w", err)
	}
	return c, nil
}

func (c shellConfig) check() error {
	switch {
	case c.Command == "":
		return errors.New(`"command" is required`)
	case strings.ContainsRune(c.Command, 0):
		return errors.New(`"command" contains NUL`)
	case !filepath.IsAbs(c.Command) && strings.ContainsRune(c.Command, '/'):
		return fmt.Errorf(`"command" %q must be an absolute path or a bare name`, c.Command)
	case c.Command == "." || c.Command == "..":
		return fmt.Errorf(`"command" %q is not a program`, c.Command)
	}
	if err := checkArgs(c.Args); err != nil {
		return err
	}
	for k, v := range c.Env {
		if err := checkEnvVar(k, v); err != nil {
			return fmt.Errorf(`"env": %w`, err)
		}
	}
	if p, ok := c.Env["PATH"]; ok && p == "" {
		return errors.New(`"env": PATH must not be empty`)
	}
	if c.Dir != "" && (!filepath.IsAbs(c.Dir) || strings.ContainsRune(c.Dir, 0)) {
		return fmt.Errorf(`"dir" %q must be an absolute path`, c.Dir)
	}
	return nil
}

func checkArgs(args []string) error {
	for i, a := range args {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf(`"args"[%d] contains NUL`, i)
		}
	}
	return nil
}

// decodeShellInput decodes a request's input under config c: at most
// "args", and only when c.InputArgs.
func decodeShellInput(c shellConfig, input []byte) (shellInput, error) {
	var in shellInput
	if len(bytes.TrimSpace(input)) == 0 {
		return in, nil // no input: nothing to append
	}
	if err := decodeStrict(input, &in, "command", "args", "env", "dir"); err != nil {
		return in, err
	}
	switch {
	case in.Command != "":
		return in, errors.New(`"command": the program is fixed by the action's runner_config, not chosen by the input`)
	case in.Env != nil:
		return in, errors.New(`"env": the environment is fixed by the action's runner_config, not chosen by the input`)
	case in.Dir != "":
		return in, errors.New(`"dir": the working directory is fixed by the action's runner_config, not chosen by the input`)
	case in.Args != nil && !c.InputArgs:
		return in, errors.New(`"args": the action's runner_config does not let the input add arguments (input_args is false)`)
	}
	return in, checkArgs(in.Args)
}

// shellRun is one run's program, decided from the config and the input.
type shellRun struct {
	command string   // as the config names it: argv[0]
	args    []string // the config's, then the input's
	env     map[string]string
	dir     string
}

// plan decides what one run executes: the program and everything around it
// from config, only extra arguments from input. A Failure says why not.
func plan(config, input json.RawMessage) (shellRun, *Failure) {
	if t := bytes.TrimSpace(config); len(t) == 0 || string(t) == "null" {
		return shellRun{}, &Failure{Message: errShellNoConfig.Error(), Err: errShellNoConfig}
	}
	c, err := decodeShellConfig(config)
	if err != nil {
		return shellRun{}, &Failure{Message: "invalid runner_config: " + err.Error(), Err: err}
	}
	in, err := decodeShellInput(c, input)
	if err != nil {
		return shellRun{}, invalidInput(err)
	}
	args := append(slices.Clip(c.Args), in.Args...)
	return shellRun{command: c.Command, args: args, env: c.Env, dir: c.Dir}, nil
}

// prepare resolves the program to run and builds its environment, sorted.
func (r *shellRunner) prepare(in shellRun) (path string, env []string, f *Failure) {
	vars := make(map[string]string, len(r.baseEnv)+len(in.env))
	for k, v := range r.baseEnv {
		vars[k] = v
	}
	for k, v := range in.env {
		vars[k] = v
	}
	env = make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)

	if filepath.IsAbs(in.command) {
		path = filepath.Clean(in.command)
	} else {
		var err error
		if path, err = lookPath(in.command, vars["PATH"]); err != nil {
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
