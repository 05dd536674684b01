package domain_test

import (
	"encoding/json"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

func TestPrincipalMetadata(t *testing.T) {
	t.Parallel()
	p := domain.Principal{Name: "alice", Role: "client"}
	env := domain.Envelope{Metadata: domain.PrincipalMetadata(p)}
	if string(env.Metadata) != `{"principal":"alice","role":"client"}` {
		t.Errorf("metadata %s", env.Metadata)
	}
	if got, ok, err := domain.PrincipalOf(&env); err != nil || !ok || got != p {
		t.Errorf("read back %+v %v %v", got, ok, err)
	}
	if domain.PrincipalMetadata(domain.Principal{}) != nil {
		t.Error("the anonymous caller has metadata")
	}
	for _, c := range []struct {
		meta    string
		ok, bad bool
	}{
		{``, false, false},
		{`{}`, false, false},
		{`{"other":1}`, false, false},
		{`{"principal":"bob"}`, true, false},
		{`{"principal":""}`, false, true},
		{`{"principal":"a b"}`, false, true},
		{`{"principal":7}`, false, true},
		{`[1]`, false, true},
	} {
		env := domain.Envelope{Metadata: json.RawMessage(c.meta)}
		_, ok, err := domain.PrincipalOf(&env)
		if ok != c.ok || (err != nil) != c.bad {
			t.Errorf("%s: ok %v err %v, want ok %v bad %v", c.meta, ok, err, c.ok, c.bad)
		}
	}
	if !p.OwnExecutionsOnly() || (domain.Principal{Name: "r", Role: "admin"}).OwnExecutionsOnly() {
		t.Error("OwnExecutionsOnly: a client only")
	}
}
