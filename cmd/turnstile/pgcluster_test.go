package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// pgCluster is a PostgreSQL cluster of the test's own, which the test may
// stop and start (an outage); scripts/with-postgres.sh's cluster is shared
// by the whole run and must stay up.
type pgCluster struct {
	bin, data, logFile string
	port               int
	asPostgres         bool
	URL                string
}

// newPGCluster creates and starts a throwaway cluster with initdb and
// pg_ctl from /usr/lib/postgresql/*/bin (or PATH); it skips the test,
// saying why, when they are missing or, as root, there is no postgres user.
// The cluster is stopped and removed when the test ends.
func newPGCluster(t *testing.T) *pgCluster {
	t.Helper()
	bin := ""
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			bin = d
			break
		}
	}
	if bin == "" {
		if p, err := exec.LookPath("pg_ctl"); err == nil {
			bin = filepath.Dir(p)
		}
	}
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("initdb and pg_ctl not found, and CI=true: install the PostgreSQL server")
		}
		t.Skip("initdb and pg_ctl not found (looked in /usr/lib/postgresql/*/bin and PATH): this test stops and starts a cluster of its own")
	}
	c := &pgCluster{bin: bin, asPostgres: os.Geteuid() == 0}
	base := ""
	if c.asPostgres {
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("running as root without a postgres system user to own the cluster")
		}
		base = "/tmp"
	}
	tmp, err := os.MkdirTemp(base, "turnstile-outage-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if c.asPostgres {
		if out, err := exec.Command("chown", "postgres:", tmp).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v %s", err, out)
		}
	}
	c.data, c.logFile = filepath.Join(tmp, "data"), filepath.Join(tmp, "postgres.log")
	t.Cleanup(func() {
		_ = c.pg("pg_ctl", "-D", c.data, "-m", "immediate", "-w", "stop")
		_ = os.RemoveAll(tmp)
	})
	if err := c.pg("initdb", "-D", c.data, "-U", "postgres", "-E", "UTF8", "--locale=C", "--auth-local=trust", "--auth-host=trust", "--no-sync"); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nmax_connections = 200\nfsync = on\nsynchronous_commit = on\n", c.port, tmp)
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(conf); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	c.Start(t)
	if err := c.pg("createdb", "-h", "127.0.0.1", "-p", fmt.Sprint(c.port), "-U", "postgres", "turnstile_outage"); err != nil {
		t.Fatal(err)
	}
	c.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/turnstile_outage?sslmode=disable", c.port)
	return c
}

func (c *pgCluster) pg(name string, args ...string) error {
	cmdline := append([]string{filepath.Join(c.bin, name)}, args...)
	if c.asPostgres {
		cmdline = append([]string{"runuser", "-u", "postgres", "--"}, cmdline...)
	}
	out, err := exec.Command(cmdline[0], cmdline[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmdline, " "), err, out)
	}
	return nil
}

// Start starts the cluster and waits until it takes connections.
func (c *pgCluster) Start(t *testing.T) {
	t.Helper()
	if err := c.pg("pg_ctl", "-D", c.data, "-l", c.logFile, "-w", "-t", "60", "start"); err != nil {
		t.Fatal(err)
	}
}

// Stop stops the cluster (fast shutdown: sessions are cut) and waits.
func (c *pgCluster) Stop(t *testing.T) {
	t.Helper()
	t0 := time.Now()
	if err := c.pg("pg_ctl", "-D", c.data, "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		t.Fatal(err)
	}
	t.Logf("PostgreSQL stopped in %v", time.Since(t0).Round(time.Millisecond))
}
