// Stopping on signals: the first SIGINT or SIGTERM stops the process
// gracefully (in-flight executions get the grace period, then are handed
// back to the executor); a second one stops it at once.

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// exitAtSecondSignal is the exit code of a process stopped by a second
// signal: 128 + SIGINT, as a shell reports an interrupted command.
const exitAtSecondSignal = 130

// signalContext returns a context that ends at the first SIGINT or SIGTERM.
// At the second, it writes a line to stderr and exits the process at once
// with exitAtSecondSignal: what was acknowledged is in the log, and the
// executions still running are taken back after the restart (their worker
// is declared lost), as after a crash.
func signalContext(stderr io.Writer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(stderr, "turnstile: %v: stopping gracefully (send it again to stop at once)\n", s)
		cancel()
		s = <-sigs
		fmt.Fprintf(stderr, "turnstile: %v again: stopping at once; running executions are taken back after the restart\n", s)
		os.Exit(exitAtSecondSignal)
	}()
	return ctx, func() { signal.Stop(sigs); cancel() }
}
