package main

import (
	"errors"
	"flag"
	"time"
)

// feedOptions are serve's bounds on live feeds (see api.Config and
// docs/failures.md): the feeds open at once, those of one token (or one
// client address without a token), and how long a client may go without
// reading before its feed is cut (it resumes with Last-Event-ID).
type feedOptions struct {
	max, perToken int
	stall         time.Duration
}

func feedFlags(fs *flag.FlagSet) *feedOptions {
	o := &feedOptions{}
	fs.IntVar(&o.max, "max-feeds", 1000, "feeds (SSE) open at once; more answer 429 with Retry-After")
	fs.IntVar(&o.perToken, "max-feeds-per-token", 100, "feeds open at once per token (per client address without one)")
	fs.DurationVar(&o.stall, "feed-stall-timeout", 30*time.Second, "cut a feed whose client has not read for this long (it resumes with Last-Event-ID)")
	return o
}

func (o *feedOptions) check() error {
	switch {
	case o.max < 1:
		return errors.New("--max-feeds must be at least 1")
	case o.perToken < 1:
		return errors.New("--max-feeds-per-token must be at least 1")
	case o.perToken > o.max:
		return errors.New("--max-feeds-per-token must not exceed --max-feeds")
	case o.stall < time.Second:
		return errors.New("--feed-stall-timeout must be at least 1s")
	}
	return nil
}
