// Package layout holds the test that keeps the repository's layering as
// DESIGN.md draws it: arrows point down the table only.
package layout

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/turnstile/turnstile"

// layer is one row of DESIGN.md's layout table: the packages under prefix
// may import only packages under the prefixes in mayImport (and the
// standard library and third-party modules).
type layer struct {
	prefix    string
	mayImport []string
}

// layers, top-down reading of DESIGN.md's table. A package matches the
// longest prefix. internal/ holds only small helpers the layers share, so
// it imports nothing of ours but internal/; the simulation drives the
// services, so it stands above them, below api.
var layers = []layer{
	{"domain", nil},
	{"eventstore", []string{"domain", "eventstore", "internal"}},
	{"projections", []string{"domain", "eventstore", "projections", "internal"}},
	{"services", []string{"domain", "eventstore", "projections", "services", "internal"}},
	{"sim", []string{"domain", "eventstore", "projections", "services", "internal", "sim"}},
	{"api", []string{"domain", "projections", "services", "api", "client/wire", "internal"}},
	{"client/wire", nil},
	{"client", []string{"client"}},
	{"internal", []string{"internal"}},
	{"cmd", []string{""}},     // everything
	{"scripts", []string{""}}, // stand-alone tools, like cmd
}

func layerOf(rel string) (layer, bool) {
	best, found := layer{}, false
	for _, l := range layers {
		if under(rel, l.prefix) {
			if !found || len(l.prefix) > len(best.prefix) {
				best, found = l, true
			}
		}
	}
	return best, found
}

func allowed(l layer, dep string) bool {
	for _, p := range l.mayImport {
		if p == "" || under(dep, p) {
			return true
		}
	}
	return false
}

// under says whether package rel is prefix or below it.
func under(rel, prefix string) bool { return rel == prefix || strings.HasPrefix(rel, prefix+"/") }

// arrow says what is wrong with package rel importing package dep (both
// relative to the module), or "" when DESIGN.md's table allows it.
func arrow(rel, dep string) string {
	l, ok := layerOf(rel)
	if !ok {
		return rel + ": in no row of DESIGN.md's layout table"
	}
	switch {
	case under(dep, "api") && !under(rel, "api") && l.prefix != "cmd":
		return rel + " imports " + dep + ": nothing imports api"
	case under(dep, "cmd"):
		return rel + " imports " + dep + ": nothing imports cmd"
	case under(dep, "sim") && !under(rel, "sim"):
		return rel + " imports " + dep + ": nothing imports the simulation"
	case !allowed(l, dep):
		return fmt.Sprintf("%s imports %s: %s may import only %v", rel, dep, l.prefix, l.mayImport)
	}
	return ""
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// TestLayering derives the import graph with `go list` and fails on every
// arrow against DESIGN.md's table: domain imports nothing of ours, stores
// import no reader, projections import no service, api imports no store,
// the client only its wire types, internal/ nothing above it, and nothing
// imports api, cmd or the simulation.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if _, ok := layerOf(rel); !ok {
			t.Errorf("%s: in no row of DESIGN.md's layout table", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			if bad := arrow(rel, strings.TrimPrefix(imp, module+"/")); bad != "" {
				t.Error(bad)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d packages; expected the whole module", n)
	}
}

// TestLayeringRules checks the table itself, on arrows the module may not
// hold today: a helper under internal/ that reaches up to a service (or a
// store, or domain) is refused, as is anything that imports the simulation,
// while the arrows DESIGN.md draws stay allowed.
func TestLayeringRules(t *testing.T) {
	for _, c := range []struct {
		rel, dep string
		ok       bool
	}{
		{"internal/gopool", "internal/startstop", true},
		{"eventstore/embedded", "internal/gopool", true},
		{"services/node", "internal/startstop", true},
		{"internal/helper", "services/executor", false},
		{"internal/helper", "projections", false},
		{"internal/helper", "eventstore/memstore", false},
		{"internal/helper", "domain", false},
		{"internal/helper", "client/wire", false},
		{"internal/helper", "sim", false},
		{"sim", "services/executor", true},
		{"sim", "eventstore/faulty", true},
		{"sim", "internal/valuediff", true},
		{"sim", "api", false},
		{"sim", "cmd/turnstile", false},
		{"services/executor", "sim", false},
		{"cmd/turnstile", "sim", false},
		{"scripts/mutants", "sim", false},
		{"api", "sim", false},
		{"domain", "internal/gopool", false},
		{"domain", "eventstore", false},
		{"eventstore/embedded", "projections", false},
		{"projections", "services/executor", false},
		{"api", "eventstore/embedded", false},
		{"services/executor", "api", false},
		{"client", "services/node", false},
		{"cmd/turnstile", "api", true},
	} {
		if bad := arrow(c.rel, c.dep); (bad == "") != c.ok {
			t.Errorf("%s imports %s: want allowed %v, the table says %q", c.rel, c.dep, c.ok, bad)
		}
	}
}
