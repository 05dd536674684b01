//go:build !unix

package diskfs

import (
	"fmt"
	"os"
	"runtime"
)

// lockDir fails: the embedded store relies on flock, which this platform lacks.
func lockDir(path string) (*os.File, error) {
	return nil, fmt.Errorf("embedded: locking %s: not supported on %s", path, runtime.GOOS)
}
