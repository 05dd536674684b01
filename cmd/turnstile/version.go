package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// versionInfo is what `turnstile version` prints: where this binary came
// from, read from the build information the Go toolchain records.
type versionInfo struct {
	Version    string `json:"version"`               // the module's version (v1.2.3, a pseudo-version, or "(devel)"), or -X main.version
	Commit     string `json:"commit,omitempty"`      // the VCS revision the binary was built from
	CommitTime string `json:"commit_time,omitempty"` // RFC 3339
	Modified   bool   `json:"modified"`              // built from a tree with uncommitted changes
	Go         string `json:"go"`                    // the Go toolchain's version
	Platform   string `json:"platform"`              // GOOS/GOARCH
}

// buildVersion reads the binary's build information.
func buildVersion() versionInfo {
	v := versionInfo{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if v.Version == "dev" && bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// cmdVersion prints the version, commit and Go version.
func cmdVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", stderr)
	asJSON := fs.Bool("json", false, "print the version as one JSON document")
	if err := parse(fs, args); err != nil {
		return err
	}
	printVersion(stdout, *asJSON)
	return nil
}

func printVersion(w io.Writer, asJSON bool) {
	v := buildVersion()
	if asJSON {
		printJSON(w, v)
		return
	}
	commit := v.Commit
	if commit == "" {
		commit = "unknown (built outside a git checkout, or with -buildvcs=false)"
	}
	if v.Modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "turnstile %s\ncommit:   %s\n", v.Version, commit)
	if v.CommitTime != "" {
		fmt.Fprintf(w, "time:     %s\n", v.CommitTime)
	}
	fmt.Fprintf(w, "go:       %s %s\n", v.Go, v.Platform)
}
