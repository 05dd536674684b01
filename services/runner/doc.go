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
// are decoded strictly: the input must be one JSON object;
// an unknown key, a key in the wrong letter case, a repeated key, a value of the
// wrong type or trailing data is a Failure whose message starts with
// "invalid input: ".
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
// core.shell: input {"command": "/bin/echo", "args": ["hi"], "env": {"K": "V"},
// "dir": "/abs/dir"}; only command is required.
//   - command is an absolute path, or a bare name looked up in the run's PATH
//     (absolute entries only); relative paths such as "./x" are refused. The
//     program is executed directly: no shell, no interpolation, no globbing.
//   - The environment is Config.ShellEnv (default: only PATH=DefaultShellPath)
//     extended, and overridden key by key, by the input's env; the server's own
//     environment is never passed on. PATH can be overridden but not emptied.
//   - dir is the working directory (absolute); default the server's.
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
//   - It runs any program as the server's user: see Config.DisableShell and
//     Config.ShellAllowedCommands. It is implemented on Linux; elsewhere every
//     run fails.
//
// core.http: input {"method": "POST", "url": "https://…", "headers": {"K": "v" or
// ["v1", "v2"]}, "body": …, "fail_on_status": false}; only url is required.
//   - method is GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS, in any letter
//     case; default GET. url is absolute, http or https, with a host.
//   - A Host header sets the request's host. Header names must be tokens and
//     values free of control characters.
//   - body absent or null sends no body; a JSON string is sent as is (no
//     Content-Type added); any other JSON value (object, array, number, bool)
//     is sent as compact JSON with Content-Type: application/json unless the
//     headers set a Content-Type.
//   - Result {"status": 200, "headers": {"Content-Type": ["…"]}, "body": "…"}
//     plus "body_truncated": true when the body exceeded Config.MaxOutputBytes
//     (the first bytes are kept). The body is text; invalid UTF-8 becomes
//     U+FFFD. Redirects are followed (up to 10 with the default client).
//   - Any response is a success whatever its status: a 404 or a 500 is a
//     result for the caller to judge. With "fail_on_status": true a status >=
//     400 is a Failure carrying the same result.
//   - Transport errors (refused, DNS, TLS, the client's own timeout) are a
//     Failure without a result. It can reach any address the server can: see
//     Config.DisableHTTP.
//
// The package uses the standard library only.
package runner
