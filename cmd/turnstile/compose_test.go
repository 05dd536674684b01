package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/turnstile/turnstile/services/node"
)

// composeFile is the part of docker-compose.yaml the test checks.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build       string            `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Profiles    []string          `yaml:"profiles"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
}

// flagsOf returns the flags subcommand sub defines, from its own -h output.
func flagsOf(t *testing.T, sub string) map[string]bool {
	t.Helper()
	var out, errOut bytes.Buffer
	run(context.Background(), []string{sub, "-h"}, &out, &errOut)
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(out.String()+errOut.String(), -1) { // -h prints to stdout
		flags[m[1]] = true
	}
	if len(flags) == 0 {
		t.Fatalf("turnstile %s -h lists no flags:\n%s%s", sub, out.String(), errOut.String())
	}
	return flags
}

// TestComposeFile checks docker-compose.yaml against the binary: the default
// profile is the PostgreSQL topology (PostgreSQL, a migration, the API, two
// executors, two workers), every turnstile command names a real subcommand
// and only flags it defines, worker ids and executor names are distinct,
// every health check of a turnstile service runs `turnstile healthcheck` on
// an address the service serves, and dependencies name real services (and
// wait for health only where there is a health check).
func TestComposeFile(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("docker-compose.yaml does not parse: %v", err)
	}
	known := map[string]bool{"serve": true, "executor": true, "worker": true, "migrate": true}
	flagSets := map[string]map[string]bool{}
	byRole := map[string][]string{} // subcommand → services, default profile only
	ids := map[string]string{}
	for name, svc := range cf.Services {
		for dep, d := range svc.DependsOn {
			other, ok := cf.Services[dep]
			if !ok {
				t.Errorf("%s depends on %s, which is not a service", name, dep)
				continue
			}
			if d.Condition == "service_healthy" && other.Healthcheck == nil {
				t.Errorf("%s waits for %s to be healthy, which has no health check", name, dep)
			}
		}
		for _, v := range svc.Volumes {
			if vol, _, _ := strings.Cut(v, ":"); !strings.HasPrefix(vol, "/") && !strings.HasPrefix(vol, ".") {
				if _, ok := cf.Volumes[vol]; !ok {
					t.Errorf("%s mounts volume %s, which is not declared", name, vol)
				}
			}
		}
		if svc.Build != "." {
			continue // not turnstile's image
		}
		if len(svc.Command) == 0 || !known[svc.Command[0]] {
			t.Errorf("%s runs %v: not a turnstile subcommand a service should run", name, svc.Command)
			continue
		}
		sub := svc.Command[0]
		if flagSets[sub] == nil {
			flagSets[sub] = flagsOf(t, sub)
		}
		args := map[string]string{}
		for i := 1; i < len(svc.Command); i++ {
			a := svc.Command[i]
			if !strings.HasPrefix(a, "-") {
				t.Errorf("%s: argument %q is not a flag", name, a)
				continue
			}
			f, v, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !flagSets[sub][f] {
				t.Errorf("%s: turnstile %s has no flag --%s", name, sub, f)
				continue
			}
			if !hasValue && !strings.HasPrefix(f, "executor") && i+1 < len(svc.Command) {
				i++
				v = svc.Command[i]
			}
			args[f] = v
		}
		// The arguments must also parse: the subcommand's own checks, short of starting.
		if store := args["store"]; strings.HasPrefix(store, "postgres://") {
			u, err := url.Parse(store)
			if err != nil || u.Hostname() != "postgres" {
				t.Errorf("%s: store %q does not name the postgres service", name, store)
			} else if db := cf.Services["postgres"].Environment["POSTGRES_DB"]; strings.TrimPrefix(u.Path, "/") != db {
				t.Errorf("%s: store names database %q, the postgres service creates %q", name, u.Path, db)
			}
		}
		if len(svc.Profiles) == 0 {
			byRole[sub] = append(byRole[sub], name)
			if id := args["id"] + args["name"]; id != "" {
				if other, dup := ids[sub+" "+id]; dup {
					t.Errorf("%s and %s both use the %s id %q", name, other, sub, id)
				}
				ids[sub+" "+id] = name
			}
		}
		if svc.Healthcheck != nil {
			test := svc.Healthcheck.Test
			if len(test) != 4 || test[0] != "CMD" || test[1] != "turnstile" || test[2] != "healthcheck" {
				t.Errorf("%s: health check %v: want [CMD turnstile healthcheck URL]", name, test)
				continue
			}
			u, err := url.Parse(test[3])
			if err != nil {
				t.Errorf("%s: health check URL %q: %v", name, test[3], err)
				continue
			}
			served := args["health-addr"]
			if sub == "serve" {
				served = args["addr"]
			}
			_, servedPort, err := net.SplitHostPort(served)
			if err != nil || servedPort != u.Port() {
				t.Errorf("%s: health check on port %s, but the service serves %q", name, u.Port(), served)
			}
			if !slices.Contains([]string{"/healthz", "/readyz"}, u.Path) {
				t.Errorf("%s: health check path %q is neither /healthz nor /readyz", name, u.Path)
			}
		}
		if sub == "serve" && args["addr"] != "" && !strings.HasPrefix(args["addr"], "127.") && svc.Environment["TURNSTILE_TOKENS"] == "" {
			t.Errorf("%s: serve on %s without tokens is refused", name, args["addr"])
		}
	}
	if _, ok := cf.Services["postgres"]; !ok {
		t.Error("no postgres service")
	}
	for sub, want := range map[string]int{"serve": 1, "executor": 2, "worker": 2, "migrate": 1} {
		if got := len(byRole[sub]); got != want {
			t.Errorf("the default profile runs %d `turnstile %s` services %v, want %d", got, sub, byRole[sub], want)
		}
	}
	for _, name := range []string{"kurrentdb", "turnstile-kurrentdb"} {
		if svc, ok := cf.Services[name]; !ok || !slices.Contains(svc.Profiles, "kurrentdb") {
			t.Errorf("%s: missing from the kurrentdb profile", name)
		}
	}
}

// TestHealthcheckCommand: healthcheck succeeds on a 2xx answer only, and
// refuses what is not an http(s) URL.
func TestHealthcheckCommand(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"healthcheck", "ftp://x"}, &out, &errOut); code != 2 {
		t.Errorf("healthcheck ftp://x: exit %d, want 2 (usage)", code)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now
	if code := run(context.Background(), []string{"healthcheck", "http://" + addr + "/healthz"}, &out, &errOut); code != 3 {
		t.Errorf("healthcheck of a closed port: exit %d, want 3", code)
	}
	var logs serveLog
	health, err := node.StartHealth("127.0.0.1:0", newLogger(&logs), func() (bool, any) { return false, "not yet" })
	if err != nil {
		t.Fatal(err)
	}
	defer health.Stop()
	m := regexp.MustCompile(`msg="health endpoints" addr=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("StartHealth logged no address: %s", logs.String())
	}
	if code := run(context.Background(), []string{"healthcheck", "http://" + m[1] + "/healthz"}, &out, &errOut); code != 0 {
		t.Errorf("healthcheck of /healthz: exit %d, want 0 (%s)", code, errOut.String())
	}
	if code := run(context.Background(), []string{"healthcheck", "http://" + m[1] + "/readyz"}, &out, &errOut); code != 3 {
		t.Errorf("healthcheck of a /readyz that is not ready: exit %d, want 3", code)
	}
}
