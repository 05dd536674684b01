package embedded

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// levelFiles returns the names of the sealed part's level files in dir
// (and of a sealed file of earlier versions), sorted.
func levelFiles(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if _, _, ok := parseLevelName(e.Name()); ok || e.Name() == sealedName {
			out = append(out, e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// onlyLevel returns the path of the single level file in dir.
func onlyLevel(t testing.TB, dir string) string {
	t.Helper()
	names := levelFiles(t, dir)
	if len(names) != 1 {
		t.Fatalf("%s holds the level files %v, want one", dir, names)
	}
	return filepath.Join(dir, names[0])
}

// removeLevels removes every level file of dir; an error if there is none.
func removeLevels(t testing.TB, dir string) error {
	t.Helper()
	names := levelFiles(t, dir)
	if len(names) == 0 {
		return os.ErrNotExist
	}
	for _, name := range names {
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// levelBytes is the level files of dir, back to back.
func levelBytes(t testing.TB, dir string) []byte {
	t.Helper()
	var out []byte
	for _, name := range levelFiles(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b...)
	}
	return out
}
