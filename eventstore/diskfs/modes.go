package diskfs

import (
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
)

// Loose is a directory or file whose mode lets others than its owner in
// (any of the bits 0o077).
type Loose struct {
	Path string
	Mode fs.FileMode // its permission bits
}

// maxLoose bounds the entries FindLoose returns.
const maxLoose = 10

// FindLoose walks dir and returns dir itself and the directories and files
// under it whose modes are looser than DirMode and FileMode (at most ten,
// dir first, in walk order), and how many more there are. It changes
// nothing: an operator may have opened them on purpose (a group of
// auditors), and a silent chmod would undo that.
func FindLoose(dir string) (found []Loose, more int, err error) {
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // removed meanwhile
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			if len(found) < maxLoose {
				found = append(found, Loose{Path: path, Mode: perm})
			} else {
				more++
			}
		}
		return nil
	})
	return found, more, err
}

// WarnLoose logs a warning for each entry FindLoose finds under dir (what
// names dir: "data directory", "archive"), saying what the operator should
// do; it logs nothing when all is the owner's alone (or log is nil).
func WarnLoose(log *slog.Logger, what, dir string) {
	if log == nil {
		return
	}
	found, more, err := FindLoose(dir)
	if err != nil {
		log.Warn("cannot check the modes of the "+what, "path", dir, "err", err)
		return
	}
	for _, l := range found {
		log.Warn("the "+what+" is readable by others than its owner: it holds every execution's input and result (chmod go-rwx, see docs/security.md)",
			"path", l.Path, "mode", fmt.Sprintf("%#o", l.Mode))
	}
	if more > 0 {
		log.Warn("the "+what+" has more entries readable by others than its owner", "path", dir, "more", more)
	}
}
