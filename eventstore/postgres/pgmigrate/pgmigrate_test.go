package pgmigrate

import (
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	t.Parallel()
	ms := Load(fstest.MapFS{"m/0001_first.sql": {Data: []byte("SELECT 1")}, "m/0002_second.sql": {Data: []byte("SELECT 2")}}, "m", "test")
	if len(ms) != 2 || ms[0] != (Migration{1, "first", "SELECT 1"}) || ms[1].Version != 2 || ms[1].Name != "second" {
		t.Fatalf("Load: %+v", ms)
	}
	if got := (Set{Migrations: ms}).Latest(); got != 2 {
		t.Errorf("Latest = %d, want 2", got)
	}
	for name, files := range map[string]fstest.MapFS{
		"no number":   {"m/log.sql": {}},
		"gap":         {"m/0001_a.sql": {}, "m/0003_b.sql": {}},
		"duplicate":   {"m/0001_a.sql": {}, "m/0001_b.sql": {}},
		"short":       {"m/001_a.sql": {}},
		"no name":     {"m/0001_.sql": {}},
		"none at all": {},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Load did not panic", name)
				}
			}()
			Load(files, "m", "test")
		}()
	}
}
