package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRegistry(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	if _, ok := reg.Lookup("x"); ok {
		t.Fatal("empty registry found x")
	}
	if len(reg.Names()) != 0 {
		t.Fatal("empty registry has names")
	}
	r := Func(func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"ok":true}`), nil
	})
	if err := reg.Register("b.one", r); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register("a.two", r); err != nil {
		t.Fatal(err)
	}
	err := reg.Register("b.one", r)
	if !errors.Is(err, ErrDuplicateRunner) {
		t.Fatalf("duplicate register: %v, want ErrDuplicateRunner", err)
	}
	if err := reg.Register("", r); err == nil {
		t.Fatal("empty name accepted")
	}
	if err := reg.Register("c", nil); err == nil {
		t.Fatal("nil runner accepted")
	}
	if got := reg.Names(); !slices.Equal(got, []string{"a.two", "b.one"}) {
		t.Fatalf("Names = %v", got)
	}
	got, ok := reg.Lookup("b.one")
	if !ok {
		t.Fatal("b.one not found")
	}
	out, err := got.Run(context.Background(), nil)
	if err != nil || string(out) != `{"ok":true}` {
		t.Fatalf("Run = %s, %v", out, err)
	}
}

func TestRegistryConcurrent(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			name := fmt.Sprintf("r%d", i%8)
			_ = reg.Register(name, Func(nil))
			reg.Lookup(name)
			reg.Names()
		})
	}
	wg.Wait()
	if n := len(reg.Names()); n != 8 {
		t.Fatalf("%d names, want 8", n)
	}
}

func TestBuiltinsNames(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []string
	}{
		{"defaults", Config{}, []string{NameEcho, NameFail, NameNoop, NameSleep}},
		{"all", Config{Enabled: AllBuiltins, ShellAllowRoot: true}, []string{NameEcho, NameFail, NameHTTP, NameNoop, NameShell, NameSleep}},
		{"no shell", Config{Enabled: AllBuiltins, DisableShell: true}, []string{NameEcho, NameFail, NameHTTP, NameNoop, NameSleep}},
		{"no http", Config{Enabled: AllBuiltins, DisableHTTP: true, ShellAllowRoot: true}, []string{NameEcho, NameFail, NameNoop, NameShell, NameSleep}},
		{"shell and echo", Config{Enabled: []string{NameShell, NameEcho}, ShellAllowRoot: true}, []string{NameEcho, NameShell}},
		{"none", Config{Enabled: []string{}}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Builtins(tt.cfg).Names(); !slices.Equal(got, tt.want) {
				t.Fatalf("Names = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "" means valid
	}{
		{"zero", Config{}, ""},
		{"explicit", Config{MaxOutputBytes: 1, ShellKillGrace: time.Millisecond, HTTPClient: &http.Client{},
			ShellEnv: map[string]string{"PATH": "/bin", "HOME": "/tmp"}, ShellAllowedCommands: []string{"/bin/echo"}}, ""},
		{"negative output", Config{MaxOutputBytes: -1}, "MaxOutputBytes"},
		{"huge output", Config{MaxOutputBytes: MaxOutputBytesLimit + 1}, "MaxOutputBytes"},
		{"negative grace", Config{ShellKillGrace: -time.Second}, "ShellKillGrace"},
		{"huge grace", Config{ShellKillGrace: time.Hour}, "ShellKillGrace"},
		{"no PATH", Config{ShellEnv: map[string]string{"HOME": "/tmp"}}, "PATH"},
		{"empty PATH", Config{ShellEnv: map[string]string{"PATH": ""}}, "PATH"},
		{"bad env name", Config{ShellEnv: map[string]string{"PATH": "/bin", "A=B": "x"}}, "invalid variable name"},
		{"NUL env value", Config{ShellEnv: map[string]string{"PATH": "/bin\x00"}}, "NUL"},
		{"relative allowed", Config{ShellAllowedCommands: []string{"echo"}}, "absolute"},
		{"unclean allowed", Config{ShellAllowedCommands: []string{"/bin/../bin/echo"}}, "absolute"},
		{"unknown runner", Config{Enabled: []string{"core.nope"}}, "unknown built-in runner"},
		{"custom transport", Config{HTTPClient: &http.Client{Transport: http.NewFileTransport(http.Dir("/"))}}, "not an *http.Transport"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
			defer func() {
				if recover() == nil {
					t.Fatal("Builtins accepted an invalid config")
				}
			}()
			Builtins(tt.cfg)
		})
	}
}
