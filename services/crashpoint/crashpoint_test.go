package crashpoint

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestArm(t *testing.T) {
	defer func() { _ = arm("") }()
	for _, tc := range []struct {
		spec, err string
	}{
		{"", ""},
		{"worker.started:3", ""},
		{" executor.granted:1 , forwarder.before-publish:20 ", ""},
		{"worker.started", "is not NAME:N"},
		{"worker.started:0", "is not NAME:N"},
		{"worker.started:x", "is not NAME:N"},
		{"nowhere:1", `unknown crash point "nowhere"`},
	} {
		err := arm(tc.spec)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("arm(%q) = %v, want an error containing %q", tc.spec, err, tc.err)
		}
		if err == nil && armed != (strings.TrimSpace(tc.spec) != "") {
			t.Errorf("arm(%q): armed = %v", tc.spec, armed)
		}
	}
}

// TestHitKills runs this test binary again with a crash point armed for its
// third pass: it must die of SIGKILL right there, after two harmless passes
// and before anything that follows.
func TestHitKills(t *testing.T) {
	if os.Getenv("CRASHPOINT_CHILD") == "1" {
		for i := 1; i <= 5; i++ {
			Hit(WorkerStarted)
			Hit(ExecutorGranted) // not armed: never kills
			_, _ = os.Stdout.WriteString("passed " + string(rune('0'+i)) + "\n")
		}
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHitKills$")
	cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", Env+"="+WorkerStarted+":3")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("the child was not killed (err %v):\n%s", err, out)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the child ended with %v, want SIGKILL:\n%s", ee, out)
	}
	s := string(out)
	if !strings.Contains(s, "passed 2\n") || strings.Contains(s, "passed 3") || !strings.Contains(s, "crash point worker.started reached (pass 3)") {
		t.Fatalf("the child did not die at the third pass:\n%s", s)
	}
}

// TestUnarmedIsFree: with nothing armed, Hit does not allocate.
func TestUnarmedIsFree(t *testing.T) {
	if armed {
		t.Skip(Env + " is set")
	}
	if n := testing.AllocsPerRun(1000, func() { Hit(WorkerStarted) }); n != 0 {
		t.Fatalf("Hit allocates %v times when nothing is armed", n)
	}
}

func BenchmarkHitUnarmed(b *testing.B) {
	for b.Loop() {
		Hit(WorkerStarted)
	}
}
