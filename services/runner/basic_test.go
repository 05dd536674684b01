package runner

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestBasicRunners(t *testing.T) {
	t.Parallel()
	reg := Builtins(Config{})
	tests := []struct {
		name    string
		runner  string
		input   string
		want    string // expected result (compared as JSON), when wantErr is ""
		wantErr string // substring of the *Failure's message
	}{
		{"noop object", NameNoop, `{"a":1}`, `{}`, ""},
		{"noop nothing", NameNoop, ``, `{}`, ""},
		{"noop garbage", NameNoop, `not json`, `{}`, ""},
		{"echo object", NameEcho, ` {"a":[1,2],"b":{"c":null}} `, `{"a":[1,2],"b":{"c":null}}`, ""},
		{"echo empty object", NameEcho, `{}`, `{}`, ""},
		{"echo array", NameEcho, `[1]`, "", "invalid input: want a JSON object"},
		{"echo string", NameEcho, `"x"`, "", "invalid input"},
		{"echo null", NameEcho, `null`, "", "invalid input: no input"},
		{"echo empty", NameEcho, ``, "", `invalid input: no input: core.echo returns its input, a JSON object`},
		{"echo blank", NameEcho, " \n\t", "", `invalid input: no input`},
		{"echo invalid", NameEcho, `{"a":`, "", "invalid input: not valid JSON"},
		{"echo trailing", NameEcho, `{} {}`, "", "invalid input"},
		{"sleep zero", NameSleep, `{"seconds":0}`, `{"slept_seconds":0}`, ""},
		{"sleep short", NameSleep, `{"seconds":0.01}`, `{"slept_seconds":0.01}`, ""},
		{"sleep missing", NameSleep, `{}`, "", `invalid input: "seconds" is required`},
		{"sleep null", NameSleep, `{"seconds":null}`, "", `"seconds" is required`},
		{"sleep negative", NameSleep, `{"seconds":-1}`, "", "must be between"},
		{"sleep too long", NameSleep, `{"seconds":86401}`, "", "must be between"},
		{"sleep string", NameSleep, `{"seconds":"1"}`, "", `field "seconds": got a JSON string`},
		{"sleep unknown field", NameSleep, `{"seconds":0,"extra":1}`, "", `unknown field "extra"`},
		{"sleep wrong case", NameSleep, `{"Seconds":0}`, "", `unknown field "Seconds"`},
		{"sleep duplicate", NameSleep, `{"seconds":0,"seconds":1}`, "", `duplicate field "seconds"`},
		{"sleep trailing", NameSleep, `{"seconds":0} x`, "", "invalid input"},
		{"sleep array", NameSleep, `[0]`, "", "want a JSON object"},
		{"sleep empty", NameSleep, ``, "", "empty input"},
		{"fail message", NameFail, `{"message":"boom"}`, "", "boom"},
		{"fail default", NameFail, `{}`, "", defaultFailMessage},
		{"fail unknown field", NameFail, `{"message":"x","code":1}`, "", `invalid input: unknown field "code"`},
		{"fail bad type", NameFail, `{"message":1}`, "", "invalid input"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, ok := reg.Lookup(tt.runner)
			if !ok {
				t.Fatalf("no %s", tt.runner)
			}
			out, err := r.Run(context.Background(), json.RawMessage(tt.input))
			if tt.wantErr != "" {
				f := asFailure(t, err)
				if !strings.Contains(f.Message, tt.wantErr) {
					t.Fatalf("failure %q, want it to contain %q", f.Message, tt.wantErr)
				}
				if out != nil {
					t.Fatalf("result %s alongside a failure", out)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !jsonEqual(t, out, tt.want) {
				t.Fatalf("result %s, want %s", out, tt.want)
			}
		})
	}
}

func TestFailExactMessage(t *testing.T) {
	t.Parallel()
	_, err := mustRunner(t, Config{}, NameFail).Run(context.Background(), json.RawMessage(`{"message":"disk on fire"}`))
	if f := asFailure(t, err); f.Message != "disk on fire" || f.Error() != "disk on fire" || f.Result != nil {
		t.Fatalf("failure = %+v", f)
	}
}

func TestEchoDoesNotAlias(t *testing.T) {
	t.Parallel()
	in := json.RawMessage(`{"a":1}`)
	out, err := mustRunner(t, Config{}, NameEcho).Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	in[2] = 'b'
	if string(out) != `{"a":1}` {
		t.Fatalf("result changed with the input: %s", out)
	}
}

func TestSleepWaits(t *testing.T) {
	t.Parallel()
	start := time.Now()
	_, err := mustRunner(t, Config{}, NameSleep).Run(context.Background(), json.RawMessage(`{"seconds":0.1}`))
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Fatalf("slept %s, want at least 100ms", d)
	}
}

func TestSleepCancel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	out, err := mustRunner(t, Config{}, NameSleep).Run(ctx, json.RawMessage(`{"seconds":30}`))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancelled sleep returned after %s", d)
	}
	if out != nil {
		t.Fatalf("result %s from a cancelled sleep", out)
	}
	checkCtxErr(t, err, context.Canceled)
}

func TestSleepDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := mustRunner(t, Config{}, NameSleep).Run(ctx, json.RawMessage(`{"seconds":30}`))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timed-out sleep returned after %s", d)
	}
	checkCtxErr(t, err, context.DeadlineExceeded)
}

// Every built-in returns the context's error, without running, when ctx is
// already done — even for input that would otherwise fail.
func TestDoneContext(t *testing.T) {
	t.Parallel()
	inputs := map[string]string{
		NameNoop:  `{}`,
		NameEcho:  `{}`,
		NameSleep: `{"seconds":0}`,
		NameFail:  `{"message":"x"}`,
		NameShell: `{"command":"/bin/echo"}`,
		NameHTTP:  `{"url":"http://127.0.0.1:1/"}`,
	}
	reg := Builtins(Config{Enabled: AllBuiltins, ShellAllowRoot: true})
	for _, name := range reg.Names() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r, _ := reg.Lookup(name)
			cancelled, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := r.Run(cancelled, json.RawMessage(inputs[name]))
			checkCtxErr(t, err, context.Canceled)

			expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			defer cancel2()
			_, err = r.Run(expired, json.RawMessage(inputs[name]))
			checkCtxErr(t, err, context.DeadlineExceeded)
		})
	}
}

func jsonEqual(t *testing.T, got json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("result %s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

// TestIsInstant: only the runners that wait on nothing may run without a
// deadline of their own; the ones that wait must get the action's timeout.
func TestIsInstant(t *testing.T) {
	reg := Builtins(Config{Enabled: AllBuiltins, ShellAllowRoot: true})
	for name, want := range map[string]bool{NameNoop: true, NameEcho: true, NameFail: true, NameSleep: false, NameShell: false, NameHTTP: false} {
		r, ok := reg.Lookup(name)
		if !ok {
			t.Fatalf("%s is not a built-in", name)
		}
		if got := IsInstant(r); got != want {
			t.Errorf("IsInstant(%s) = %v, want %v", name, got, want)
		}
	}
	if IsInstant(Func(func(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil })) {
		t.Error("a Func is instant")
	}
}
