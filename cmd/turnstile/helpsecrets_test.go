package main

import (
	"bytes"
	"context"
	"sort"
	"strings"
	"testing"
)

// TestHelpShowsNoSecrets: with every environment variable the commands read
// set to a marker, no command's --help prints a marker: a default taken from
// the environment (a store URL with its password, a token) is named, never
// shown. The variables still apply. Not parallel: it sets the environment.
func TestHelpShowsNoSecrets(t *testing.T) {
	markers := map[string]string{
		"TURNSTILE_STORE":             "postgres://u:MARKER-STORE@db/x",
		"TURNSTILE_TOKEN":             "MARKER-TOKEN",
		"TURNSTILE_TOKENS":            "admin:MARKER-TOKENS",
		"TURNSTILE_SERVER":            "http://MARKER-SERVER:1",
		"TURNSTILE_PG_SCHEMA":         "MARKER-SCHEMA",
		"TURNSTILE_POSTGRES_URL":      "postgres://u:MARKER-PGURL@db/x",
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://u:MARKER-OTLP@collector:4318",
	}
	for k, v := range markers {
		t.Setenv(k, v)
	}
	// Every command: those with their own flags, every client command, and
	// the groups' and the binary's own help.
	var cmds [][]string
	for _, c := range commands {
		if c.synopsis != "" {
			cmds = append(cmds, strings.Fields(c.name))
		}
	}
	for group, sc := range map[string]map[string]subcommand{"actions": actionsCommands, "exec": execCommands, "watch": watchCommands, "log": logCommands} {
		cmds = append(cmds, []string{group})
		for sub := range sc {
			cmds = append(cmds, []string{group, sub})
		}
	}
	cmds = append(cmds, []string{"bench"}, []string{}, []string{"help", "executor"})
	sort.Slice(cmds, func(i, j int) bool { return strings.Join(cmds[i], " ") < strings.Join(cmds[j], " ") })
	helps := map[string]string{}
	for _, c := range cmds {
		args := append(append([]string{}, c...), "--help")
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		text := out.String() + errOut.String()
		if code != 0 || !strings.Contains(text, "Exit codes:") {
			t.Errorf("turnstile %s: exit %d, want 0 and a help:\n%s", strings.Join(args, " "), code, text)
		}
		if strings.Contains(text, "MARKER") {
			t.Errorf("turnstile %s prints a value of the environment:\n%s", strings.Join(args, " "), text)
		}
		helps[strings.Join(c, " ")] = text
	}
	// The help names where the default comes from.
	for cmd, want := range map[string]string{"executor": "$TURNSTILE_STORE", "worker": "$TURNSTILE_STORE", "migrate": "$TURNSTILE_STORE",
		"rebuild": "$TURNSTILE_TOKEN", "exec get": "$TURNSTILE_SERVER"} {
		if !strings.Contains(helps[cmd], "(default: "+want) {
			t.Errorf("turnstile %s --help does not name %s as a default:\n%s", cmd, want, helps[cmd])
		}
	}
	// The environment still supplies the defaults.
	t.Setenv("TURNSTILE_STORE", "memory://")
	var errOut bytes.Buffer
	if code := run(context.Background(), []string{"executor"}, &errOut, &errOut); code != 2 || !strings.Contains(errOut.String(), "is memory") {
		t.Errorf("executor with TURNSTILE_STORE=memory://: exit %d, want 2 naming that store:\n%s", code, errOut.String())
	}
	t.Setenv("TURNSTILE_SERVER", "ftp://elsewhere")
	errOut.Reset()
	if code := run(context.Background(), []string{"exec", "get", "x"}, &errOut, &errOut); code != 2 || !strings.Contains(errOut.String(), `"ftp://elsewhere"`) {
		t.Errorf("exec get with TURNSTILE_SERVER=ftp://elsewhere: exit %d, want 2 naming that server:\n%s", code, errOut.String())
	}
}
