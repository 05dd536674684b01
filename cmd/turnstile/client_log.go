package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/turnstile/turnstile/client/wire"
)

// logCommands are "turnstile log …".
var logCommands = map[string]subcommand{
	"status": {nil, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *conn, _ []string) error {
			st, err := timed(ctx, c.api.Log)
			if err != nil {
				return err
			}
			c.output(st, func(w io.Writer) { printLogStatus(w, st) })
			return nil
		}
	}},
}

func printLogStatus(w io.Writer, st wire.LogStatus) {
	fmt.Fprintf(w, "head:\t%d\n", st.Head)
	fmt.Fprintf(w, "first live position:\t%d\n", st.FirstLivePosition)
	fmt.Fprintf(w, "archived segments:\t%d\n", st.ArchivedSegments)
	if st.Digest == nil {
		fmt.Fprintf(w, "digest:\tnone (an empty log, or a store that keeps no chain)\n")
		return
	}
	d := fmt.Sprintf("%d:%s", st.Digest.Position, st.Digest.Hash)
	fmt.Fprintf(w, "digest:\t%s\n", d)
	fmt.Fprintf(w, "check it later:\tturnstile verify --data DIR --digest %s\n", d)
}
