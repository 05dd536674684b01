package runner

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// TestRunKeyedBuiltins: for every built-in runner, the input field the
// action's concurrency_key names is ignored, and every other unknown field
// is still refused (issue 18: `{"seconds":3,"tenant":"a"}` under
// concurrency_key "tenant" failed with `unknown field "tenant"`).
func TestRunKeyedBuiltins(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	type tc struct {
		name, runner, config, input, key string
		want                             string // result compared as JSON ("" when a failure is wanted, or when checked by wantOut)
		wantErr                          string // substring of the *Failure's message
		wantOut                          string // substring of the raw result
	}
	tests := []tc{
		{name: "noop", runner: NameNoop, input: `{"tenant":"a"}`, key: "tenant", want: `{}`},
		{name: "echo keeps the whole object", runner: NameEcho, input: `{"a":1,"tenant":"a"}`, key: "tenant", want: `{"a":1,"tenant":"a"}`},
		{name: "sleep ignores the key", runner: NameSleep, input: `{"seconds":0,"tenant":"a"}`, key: "tenant", want: `{"slept_seconds":0}`},
		{name: "sleep numeric key", runner: NameSleep, input: `{"tenant":7,"seconds":0}`, key: "tenant", want: `{"slept_seconds":0}`},
		{name: "sleep refuses without the key", runner: NameSleep, input: `{"seconds":0,"tenant":"a"}`, wantErr: `unknown field "tenant"`},
		{name: "sleep refuses another field", runner: NameSleep, input: `{"seconds":0,"tenant":"a","extra":1}`, key: "tenant", wantErr: `unknown field "extra"`},
		{name: "sleep refuses a nested key", runner: NameSleep, input: `{"seconds":0,"x":{"tenant":"a"}}`, key: "tenant", wantErr: `unknown field "x"`},
		{name: "sleep still refuses a duplicate", runner: NameSleep, input: `{"seconds":0,"tenant":"a","seconds":1}`, key: "tenant", wantErr: `duplicate field "seconds"`},
		{name: "sleep key is its own field", runner: NameSleep, input: `{"seconds":0}`, key: "seconds", want: `{"slept_seconds":0}`},
		{name: "sleep own field still checked", runner: NameSleep, input: `{"seconds":"a"}`, key: "seconds", wantErr: `field "seconds"`},
		{name: "fail ignores the key", runner: NameFail, input: `{"message":"boom","tenant":"a"}`, key: "tenant", wantErr: "boom"},
		{name: "fail refuses without the key", runner: NameFail, input: `{"message":"boom","tenant":"a"}`, wantErr: `unknown field "tenant"`},
		{name: "fail refuses another field", runner: NameFail, input: `{"tenant":"a","code":1}`, key: "tenant", wantErr: `unknown field "code"`},
		{name: "http ignores the key", runner: NameHTTP, config: privateOK, input: `{"url":"` + srv.URL + `/k","tenant":"a"}`, key: "tenant", wantOut: `\"path\":\"/k\"`},
		{name: "http refuses without the key", runner: NameHTTP, config: privateOK, input: `{"url":"` + srv.URL + `","tenant":"a"}`, wantErr: `unknown field "tenant"`},
		{name: "http refuses another field", runner: NameHTTP, config: privateOK, input: `{"url":"` + srv.URL + `","tenant":"a","x":1}`, key: "tenant", wantErr: `unknown field "x"`},
	}
	if runtime.GOOS == "linux" {
		shellCfg := `{"command":"/bin/echo","args":["hi"],"input_args":true}`
		tests = append(tests,
			tc{name: "shell ignores the key", runner: NameShell, config: shellCfg, input: `{"args":["there"],"tenant":"a"}`, key: "tenant", wantOut: `hi there`},
			tc{name: "shell refuses without the key", runner: NameShell, config: shellCfg, input: `{"args":["x"],"tenant":"a"}`, wantErr: `unknown field "tenant"`},
			tc{name: "shell refuses another field", runner: NameShell, config: shellCfg, input: `{"tenant":"a","x":1}`, key: "tenant", wantErr: `unknown field "x"`},
			// A key that names the program is the runner's field: still refused.
			tc{name: "shell key naming command", runner: NameShell, config: shellCfg, input: `{"command":"/bin/sh"}`, key: "command", wantErr: `"command": the program is fixed`},
		)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := mustRunner(t, Config{}, tt.runner)
			var config json.RawMessage
			if tt.config != "" {
				config = json.RawMessage(tt.config)
			}
			out, err := RunKeyed(context.Background(), r, config, json.RawMessage(tt.input), tt.key)
			if tt.wantErr != "" {
				f := asFailure(t, err)
				if !strings.Contains(f.Message, tt.wantErr) {
					t.Fatalf("failure %q, want it to contain %q", f.Message, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("RunKeyed: %v", err)
			}
			if tt.wantOut != "" {
				if !strings.Contains(string(out), tt.wantOut) {
					t.Fatalf("result %s, want it to contain %s", out, tt.wantOut)
				}
				return
			}
			if !jsonEqual(t, out, tt.want) {
				t.Fatalf("result %s, want %s", out, tt.want)
			}
		})
	}
}

// TestWithoutField: the field goes, everything else stays as it was.
func TestWithoutField(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, name, want string }{
		{`{"a":1,"k":"x","b":[2]}`, "k", `{"a":1,"b":[2]}`},
		{` {"k":"x"} `, "k", `{}`},
		{`{"k":1,"k":2,"a":1}`, "k", `{"a":1}`},
		{`{"a":{"k":1}}`, "k", `{"a":{"k":1}}`},
		{`{"a":1}`, "k", `{"a":1}`},
		{`{"k":1} x`, "k", `{"k":1} x`},
		{`[{"k":1}]`, "k", `[{"k":1}]`},
		{`{"k":`, "k", `{"k":`},
		{`{"a\u006b":1,"k":2}`, "k", `{"ak":1}`},
		{`{"\u006b":1,"a":2}`, "k", `{"a":2}`},
	} {
		if got := string(withoutField(json.RawMessage(tt.in), tt.name)); got != tt.want {
			t.Errorf("withoutField(%s, %q) = %s, want %s", tt.in, tt.name, got, tt.want)
		}
	}
}

// TestRunKeyedResourceKeyFields: the key fields of the action's keyed
// resources are ignored like its concurrency_key, together with it, and
// every other unknown field is still refused. Catches: only the first
// field stripped, or the resources' fields passed to the runner.
func TestRunKeyedResourceKeyFields(t *testing.T) {
	t.Parallel()
	var r Runner = sleepRunner{}
	ctx := context.Background()
	in := json.RawMessage(`{"seconds":0,"tenant":"a","region":"eu"}`)
	if _, err := RunKeyed(ctx, r, nil, in, "tenant", "region"); err != nil {
		t.Fatalf("concurrency key and a resource's key field: %v", err)
	}
	if _, err := RunKeyed(ctx, r, nil, in, "", "tenant", "region"); err != nil {
		t.Fatalf("two resources' key fields: %v", err)
	}
	if _, err := RunKeyed(ctx, r, nil, in, "tenant"); err == nil || !strings.Contains(err.Error(), `unknown field "region"`) {
		t.Fatalf("without the resource's field: %v, want region refused", err)
	}
}
