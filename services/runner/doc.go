// Package runner holds turnstile's built-in runners and a Registry that maps
// runner names to implementations.
//
// # Outcomes
//
// A Runner turns an execution's JSON input into a JSON result. Run reports three
// kinds of outcome, which callers map onto the execution lifecycle:
//
//   - success: a non-nil, valid JSON result and a nil error (completed);
//   - the action itself failed (core.fail, a non-zero exit, invalid input, an
//     unreachable URL): an error for which errors.As(err, new(*Failure)) holds;
//     Failure.Result may carry a result to record with the failure (failed);
//   - ctx ended first: an error for which errors.Is(err, context.DeadlineExceeded)
//     (timed_out) or errors.Is(err, context.Canceled) (cancelled) holds. Such an
//     error is never a *Failure; it may be an *Interrupted carrying a partial
//     result.
//
// Every built-in returns the context's error without doing anything when ctx is
// already done. The inputs of core.sleep, core.fail, core.shell and core.http
// are decoded strictly: the input must be one JSON object; an unknown key, a
// key in the wrong letter case, a repeated key, a value of the wrong type or
// trailing data is a Failure whose message starts with "invalid input: ".
// The one exception is the field an action's concurrency_key names: it picks
// the action's queue and is the action's, not the runner's, so RunKeyed (the
// worker's way to run a handoff, which names the field) leaves it out for
// these four runners, unless it is one of the runner's own fields.
// The runner_configs of core.shell and core.http are decoded as strictly
// (ValidateConfig's error; at run time a Failure whose message starts with
// "invalid runner_config: ").
//
// # Built-in runners
//
// core.noop: any input, not even parsed; result {}.
//
// core.echo: input any JSON object; result the same object (white space around
// it trimmed). Anything else fails.
//
// core.sleep: input {"seconds": 0.25}, required, finite, 0 <= seconds <= 86400
// (MaxSleep); result {"slept_seconds": 0.25}. Cancellable while sleeping.
//
// core.fail: input {"message": "…"}; fails with that message (a Failure without
// a result). A missing or empty message gives a default one.
//
// # Configuration by the action's definition
//
// A run gets the action's runner_config next to the input (RunWith; a
// runner reads it by implementing Configured). The config is the admin's:
// it is part of the action's definition and a request's input never
// changes it. ValidateConfig checks it for the built-ins when the action
// is defined. core.noop, core.echo, core.sleep and core.fail take none.
//
// Builtins registers the built-ins Config.Enabled names; by default
// (DefaultEnabled) neither core.shell nor core.http, which reach the host
// and its network.
//
// core.shell: runner_config {"command": "/usr/bin/convert", "args": ["-resize"],
// "env": {"K": "V"}, "dir": "/abs/dir", "input_args": true}; only command is
// required. The input is {"args": ["…"]} (appended after the config's args)
// when input_args is true, and otherwise {} (or nothing).
//   - With no runner_config every run fails, saying that the program must be
//     fixed by the action's definition. An input that names "command", "env"
//     or "dir", or "args" when input_args is false, fails with "invalid
//     input: ": the input never chooses the program, its environment or its
//     directory.
//   - command is an absolute path, or a bare name looked up in the run's PATH
//     (absolute entries only); relative paths such as "./x" are refused. The
//     program is executed directly: no shell, no interpolation, no globbing.
//   - The environment is Config.ShellEnv (default: only PATH=DefaultShellPath)
//     extended, and overridden key by key, by the config's env; the server's
//     own environment is never passed on. PATH can be overridden but not
//     emptied.
//   - dir is the working directory (absolute); default the server's.
//   - The process runs as Config.ShellUser when one is named (its uid, group
//     and supplementary groups), else as the server's user; a server running
//     as root refuses to offer core.shell without a ShellUser unless
//     Config.ShellAllowRoot.
//   - Stdin is empty. Stdout and stderr are captured, each bounded by
//     Config.MaxOutputBytes: the first bytes are kept (never cutting a UTF-8
//     sequence), the rest is read and discarded.
//   - Result {"exit_code": 0, "stdout": "…", "stderr": "…"} plus
//     "stdout_truncated"/"stderr_truncated": true when output was dropped and
//     "signal": "SIGKILL" (with exit_code -1) when a signal ended the process.
//     Invalid UTF-8 in the output becomes U+FFFD.
//   - Exit status 0 succeeds. A non-zero status or death by a signal the runner
//     did not send fails with a Failure carrying the result. A command that is
//     not found, not allowed (Config.ShellAllowedCommands) or cannot start fails
//     without a result.
//   - The process runs in its own process group. When ctx ends first, the group
//     gets SIGINT, then SIGKILL after Config.ShellKillGrace; Run returns an
//     *Interrupted (wrapping ctx.Err()) with the partial result, about
//     ShellKillGrace after ctx ended at the latest. When the main process exits,
//     whatever is left in its group is killed with SIGKILL, so no background
//     process outlives the run (one that moved to another session or group
//     does, and Run waits at most a second for it to release the output pipes).
//     Run returns only after reaping the main process.
//   - It is implemented on Linux; elsewhere every run fails.
//
// core.http: runner_config {"url": "https://api.example.com/v1/", "methods":
// ["GET", "POST"], "allow_private": false}, every field optional (url: http
// or https with a host, no query or fragment; methods: default all). Input
// {"method": "POST", "path": "users/1?x=y", "headers": {"K": "v" or ["v1",
// "v2"]}, "body": …, "fail_on_status": false}.
//   - With a url in the config, the request goes to that url with the
//     input's path appended: a relative path and query, never a scheme, a
//     host, a leading "/", a "." or ".." segment (escaped or not), a
//     backslash or a fragment, so it stays under the url. An input "url" or
//     Host header is refused.
//   - With no url in the config (or no config), the input gives a full
//     "url" (absolute, http or https, with a host) as before, and "path" is
//     refused; a Host header sets the request's host.
//   - method is GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS, in any letter
//     case, default GET, and one of the config's methods when it lists them.
//   - Internal addresses are refused unless the config sets allow_private:
//     loopback, link-local (cloud metadata included), private, unspecified,
//     multicast and reserved ranges, IPv4-mapped and NAT64 forms too. The
//     check is made on every address dialled, at connect time, so a DNS
//     name that resolves to one, or a redirect to one, is refused as well;
//     the failure wraps ErrAddressRefused. Redirects (at most 10) are checked
//     again: http or https, and under the config's url when it fixes one.
//     No proxy is used.
//   - Header names must be tokens and values free of control characters.
//   - body absent or null sends no body; a JSON string is sent as is (no
//     Content-Type added); any other JSON value (object, array, number, bool)
//     is sent as compact JSON with Content-Type: application/json unless the
//     headers set a Content-Type.
//   - Result {"status": 200, "headers": {"Content-Type": ["…"]}, "body": "…"}
//     plus "body_truncated": true when the body exceeded Config.MaxOutputBytes
//     (the first bytes are kept). The body is text; invalid UTF-8 becomes
//     U+FFFD.
//   - Any response is a success whatever its status: a 404 or a 500 is a
//     result for the caller to judge. With "fail_on_status": true a status >=
//     400 is a Failure carrying the same result.
//   - Transport errors (refused, DNS, TLS, an internal address, the client's
//     own timeout) are a Failure without a result.
//
// The package uses the standard library only.
package runner
