// Tokens from a file: so that no secret need appear in the server's argv
// (readable by every local user in /proc/PID/cmdline) or its environment.
package api

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// MaxTokenFileLen bounds the size of a token file.
const MaxTokenFileLen = 1 << 20

// ReadTokenFile reads token specs from the file at path, for ParseTokens:
// one per line, "ROLE:NAME:SECRET[:scope=PREFIX…]" or the old "ROLE:SECRET"
// (see ParseTokens); blank lines and lines
// starting with '#' are skipped, and blanks around a line are trimmed. The
// file should be readable by the server's user alone (mode 0600); one that
// others may write to is refused, since whoever writes it chooses the
// tokens. Errors name the line, never its secret.
func ReadTokenFile(path string) ([]string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("token file %s: not a regular file", path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("token file %s: mode %v lets other users write it; make it 0600", path, fi.Mode().Perm())
	}
	if fi.Size() > MaxTokenFileLen {
		return nil, fmt.Errorf("token file %s: larger than %d bytes", path, MaxTokenFileLen)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var specs []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxTokenFileLen)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Count(line, ":") < 1 {
			return nil, fmt.Errorf("token file %s, line %d: want ROLE:SECRET or ROLE:NAME:SECRET", path, n)
		}
		specs = append(specs, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return specs, nil
}
