// Package layout holds the test that keeps the repository's layering as
// DESIGN.md draws it: arrows point down the table only.
package layout

import (
	"bytes"
	"encoding/json"
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
// longest prefix.
var layers = []layer{
	{"domain", nil},
	{"eventstore", []string{"domain", "eventstore", "internal"}},
	{"projections", []string{"domain", "eventstore", "projections", "internal"}},
	{"services", []string{"domain", "eventstore", "projections", "services", "internal"}},
	{"api", []string{"domain", "projections", "services", "api", "client/wire", "internal"}},
	{"client/wire", nil},
	{"client", []string{"client"}},
	{"internal", []string{"domain", "eventstore", "projections", "services", "internal", "client"}},
	{"cmd", []string{""}},     // everything
	{"scripts", []string{""}}, // stand-alone tools, like cmd
}

func layerOf(rel string) (layer, bool) {
	best, found := layer{}, false
	for _, l := range layers {
		if rel == l.prefix || strings.HasPrefix(rel, l.prefix+"/") {
			if !found || len(l.prefix) > len(best.prefix) {
				best, found = l, true
			}
		}
	}
	return best, found
}

func allowed(l layer, dep string) bool {
	for _, p := range l.mayImport {
		if p == "" || dep == p || strings.HasPrefix(dep, p+"/") {
			return true
		}
	}
	return false
}

type pkg struct {
	ImportPath string
	Imports    []string
}

// TestLayering derives the import graph with `go list` and fails on every
// arrow against DESIGN.md's table: domain imports nothing of ours, stores
// import no reader, projections import no service, api imports no store,
// the client only its wire types, and nothing imports api or cmd.
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
		l, ok := layerOf(rel)
		if !ok {
			t.Errorf("%s: in no row of DESIGN.md's layout table", rel)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if (dep == "api" || strings.HasPrefix(dep, "api/")) && l.prefix != "cmd" && l.prefix != "api" {
				t.Errorf("%s imports %s: nothing imports api", rel, dep)
				continue
			}
			if strings.HasPrefix(dep, "cmd/") {
				t.Errorf("%s imports %s: nothing imports cmd", rel, dep)
				continue
			}
			if !allowed(l, dep) {
				t.Errorf("%s imports %s: %s may import only %v", rel, dep, l.prefix, l.mayImport)
			}
		}
	}
	if n < 10 {
		t.Fatalf("go list found %d packages; expected the whole module", n)
	}
}
