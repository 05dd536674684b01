// Signal: the channel behind a part's Started.

package startstop

import "sync"

// Signal is a channel closed once, for a part's Started. The zero value is
// ready to use; it must not be copied after first use.
type Signal struct {
	once, closeOnce sync.Once
	c               chan struct{}
}

// C is the channel, closed by Close.
func (s *Signal) C() <-chan struct{} { return s.ch() }

// Close closes C; later calls do nothing.
func (s *Signal) Close() { s.closeOnce.Do(func() { close(s.ch()) }) }

func (s *Signal) ch() chan struct{} {
	s.once.Do(func() { s.c = make(chan struct{}) })
	return s.c
}
