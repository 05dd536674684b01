package client_test

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/turnstile/turnstile/client"
)

// TestDoc: every method docs/client.md names exists, and every exported
// method of Client is named there.
func TestDoc(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/client.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`\bc\.([A-Z]\w*)\(`).FindAllSubmatch(doc, -1) {
		named[string(m[1])] = true
	}
	typ := reflect.TypeFor[*client.Client]()
	for name := range named {
		if _, ok := typ.MethodByName(name); !ok {
			t.Errorf("docs/client.md names c.%s, which *client.Client does not have", name)
		}
	}
	for i := range typ.NumMethod() {
		if name := typ.Method(i).Name; !named[name] && name != "BaseURL" {
			t.Errorf("docs/client.md does not name (*client.Client).%s", name)
		}
	}
}
