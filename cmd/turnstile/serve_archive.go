package main

import (
	"errors"
	"flag"
	"time"
)

// serveArchiveFlags are serve's flags of the log over months
// (docs/log-over-months.md): checkpoints in the log and the archiver.
type serveArchiveFlags struct {
	checkpointEvery *time.Duration
	dir             *string
	after           *time.Duration
	segmentEvents   *int
}

func archiveFlags(fs *flag.FlagSet) serveArchiveFlags {
	return serveArchiveFlags{
		checkpointEvery: fs.Duration("checkpoint-every", 10*time.Minute, "log time between the executor's checkpoints in the log (its state, which restarts and the archive start from; none while the log is idle); 0: none"),
		dir:             fs.String("archive", "", "archive DIR: the log before a checkpoint older than --archive-after moves to segments there (gzip-compressed JSON lines) and leaves the live log, whose disk space is reclaimed"),
		after:           fs.Duration("archive-after", 7*24*time.Hour, "with --archive: how old (log time) a checkpoint is before the log before it is archived: executions ended longer ago leave the live log"),
		segmentEvents:   fs.Int("archive-segment-events", 0, "with --archive: events per archive segment (0: 1,000,000)"),
	}
}

func (f serveArchiveFlags) check() error {
	switch {
	case *f.checkpointEvery < 0:
		return errors.New("--checkpoint-every must be >= 0")
	case *f.segmentEvents < 0:
		return errors.New("--archive-segment-events must be >= 0")
	case *f.dir == "":
		return nil
	case *f.checkpointEvery == 0:
		return errors.New("--archive needs checkpoints in the log: --checkpoint-every > 0")
	case *f.after <= 0:
		return errors.New("--archive-after must be > 0")
	}
	return nil
}
