package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// The flags section of docs/cli.md is generated from the commands' --help:
// it lies between these two lines.
const (
	flagsDocStart = "<!-- every command's flags: generated from turnstile COMMAND --help by TestCLIDocFlags; TURNSTILE_UPDATE_DOCS=1 go test -run TestCLIDocFlags ./cmd/turnstile/ rewrites it -->\n"
	flagsDocEnd   = "<!-- end of every command's flags -->\n"
)

// clientCommon are the flags every client command takes, documented once.
var clientCommon = []string{"server", "token", "json"}

// helpFlag is one flag as --help prints it.
type helpFlag struct{ name, arg, usage string }

// helpFlags runs turnstile ARGS --help and returns the flags it lists.
func helpFlags(t *testing.T, args ...string) []helpFlag {
	t.Helper()
	var out bytes.Buffer
	if code := run(context.Background(), append(args, "--help"), &out, &out); code != 0 {
		t.Fatalf("turnstile %s --help: exit %d\n%s", strings.Join(args, " "), code, out.String())
	}
	// Defaults of this machine and process, as the docs write them.
	host, _ := os.Hostname()
	help := strings.NewReplacer(fmt.Sprintf("@%s:%d\"", host, os.Getpid()), "@HOST:PID\"",
		fmt.Sprintf("(default %q)", host), "(default the host's name)").Replace(out.String())
	_, text, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		t.Fatalf("turnstile %s --help lists no flags:\n%s", strings.Join(args, " "), out.String())
	}
	var flags []helpFlag
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"): // "  -name type" (flag.PrintDefaults)
			name, arg, _ := strings.Cut(strings.TrimPrefix(line, "  -"), " ")
			flags = append(flags, helpFlag{name: name, arg: arg})
		case strings.HasPrefix(line, "    \t") && len(flags) > 0:
			f := &flags[len(flags)-1]
			f.usage = strings.TrimSpace(f.usage + " " + strings.TrimPrefix(line, "    \t"))
		case line == "" || strings.HasPrefix(line, "Example:"):
			if len(flags) > 0 {
				return flags
			}
		}
	}
	return flags
}

// flagsTable is a markdown table of flags, those named in skip left out.
func flagsTable(flags []helpFlag, skip []string) string {
	var b strings.Builder
	b.WriteString("| flag | what |\n|---|---|\n")
	cell := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;")
	n := 0
	for _, f := range flags {
		if contains(skip, f.name) {
			continue
		}
		name := "--" + f.name
		if f.arg != "" {
			name += " " + f.arg
		}
		fmt.Fprintf(&b, "| `%s` | %s |\n", name, cell.Replace(f.usage))
		n++
	}
	if n == 0 {
		return "No flags of its own.\n"
	}
	return b.String()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// flagsDoc is docs/cli.md's flags section as the commands print their flags
// today: every command of the table, then every client command.
func flagsDoc(t *testing.T) string {
	var b strings.Builder
	b.WriteString(flagsDocStart)
	names := commandNames()
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "\n### `turnstile %s`\n\n%s", name, flagsTable(helpFlags(t, strings.Fields(name)...), nil))
	}
	fmt.Fprintf(&b, "\n### Every client command\n\n`actions`, `exec`, `watch` and `log` commands take these, and each its own below.\n\n%s",
		flagsTable(helpFlags(t, "log", "status"), nil))
	groups := map[string]map[string]subcommand{"actions": actionsCommands, "exec": execCommands, "watch": watchCommands, "log": logCommands}
	var clients []string
	for g, cmds := range groups {
		for name := range cmds {
			clients = append(clients, g+" "+name)
		}
	}
	sort.Strings(clients)
	for _, name := range clients {
		flags := helpFlags(t, strings.Fields(name)...)
		for _, c := range clientCommon {
			if !contains(flagNames(flags), c) {
				t.Errorf("turnstile %s does not take --%s, which the docs say every client command takes", name, c)
			}
		}
		fmt.Fprintf(&b, "\n### `turnstile %s`\n\n%s", name, flagsTable(flags, clientCommon))
	}
	b.WriteString("\n" + flagsDocEnd)
	return b.String()
}

func flagNames(flags []helpFlag) []string {
	var out []string
	for _, f := range flags {
		out = append(out, f.name)
	}
	return out
}

// TestCLIDocFlags: docs/cli.md documents every flag of every command, as
// the command's --help states it (name, argument, meaning, default). With
// TURNSTILE_UPDATE_DOCS=1 it rewrites the section instead of failing.
func TestCLIDocFlags(t *testing.T) {
	for _, env := range []string{"TURNSTILE_SERVER", "TURNSTILE_TOKEN", "TURNSTILE_STORE"} { // defaults that --help shows
		t.Setenv(env, "")
	}
	const path = "../../docs/cli.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	want := flagsDoc(t)
	start, end := strings.Index(doc, flagsDocStart), strings.Index(doc, flagsDocEnd)
	if start < 0 || end < start {
		t.Fatalf("docs/cli.md has no flags section (the lines %q … %q)", flagsDocStart, flagsDocEnd)
	}
	got := doc[start : end+len(flagsDocEnd)]
	if got == want {
		return
	}
	if os.Getenv("TURNSTILE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[end+len(flagsDocEnd):]), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the flags section of docs/cli.md")
		return
	}
	gotLines, wantLines := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(gotLines) || i < len(wantLines); i++ {
		var g, w string
		if i < len(gotLines) {
			g = gotLines[i]
		}
		if i < len(wantLines) {
			w = wantLines[i]
		}
		if g != w {
			t.Fatalf("docs/cli.md's flags section is not what the commands' --help say (rerun with TURNSTILE_UPDATE_DOCS=1); first difference, line %d of the section:\n docs: %s\n help: %s", i+1, g, w)
		}
	}
}

// TestHelpHidesTokens: no command's --help prints the token it would take
// from $TURNSTILE_TOKEN (a help is pasted into tickets and chats).
func TestHelpHidesTokens(t *testing.T) {
	const secret = "help-must-not-show-this-secret"
	t.Setenv("TURNSTILE_TOKEN", secret)
	var cmds [][]string
	for _, name := range commandNames() {
		cmds = append(cmds, strings.Fields(name))
	}
	for g, sub := range map[string]map[string]subcommand{"actions": actionsCommands, "exec": execCommands, "watch": watchCommands, "log": logCommands} {
		for name := range sub {
			cmds = append(cmds, []string{g, name})
		}
	}
	for _, args := range cmds {
		var out bytes.Buffer
		run(context.Background(), append(args, "--help"), &out, &out)
		if strings.Contains(out.String(), secret) {
			t.Errorf("turnstile %s --help shows $TURNSTILE_TOKEN", strings.Join(args, " "))
		}
	}
}

// commandNames names every command of the table but the client ones (the
// groups actions, exec, watch and log, listed apart) and help.
func commandNames() []string {
	var names []string
	for _, c := range commands {
		switch strings.Fields(c.name)[0] {
		case "actions", "exec", "watch", "log", "help":
			continue
		}
		names = append(names, c.name)
	}
	return names
}
