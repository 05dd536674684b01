// Reports: the events a remote worker's session writes, fenced as an
// in-process worker's are.

package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/services/repository"
)

// ErrBadReport is wrapped by the errors of reports that are malformed (400).
var ErrBadReport = domain.ErrInvalidRequest

// CheckReport validates a report's shape (not its effect).
func CheckReport(r Report) error {
	switch {
	case r.Execution == "" || len(r.Execution) > domain.MaxIDLen || eventstore.ValidateStream(domain.ExecutionStream(r.Execution)) != nil:
		return fmt.Errorf("%w: execution %q is not an execution id", ErrBadReport, clip(r.Execution))
	case r.Attempt < 0:
		return fmt.Errorf("%w: attempt %d is negative", ErrBadReport, r.Attempt)
	case len(r.Result) > 0 && !json.Valid(r.Result):
		return fmt.Errorf("%w: result is not JSON", ErrBadReport)
	}
	switch r.Status {
	case ReportRunning, ReportCompleted, ReportFailed, ReportTimedOut, ReportCancelled:
		return nil
	}
	return fmt.Errorf("%w: status %q must be running, completed, failed, timed_out or cancelled", ErrBadReport, clip(r.Status))
}

// Report writes the event a report asks for, on the session's behalf: only
// for an execution handed to the session's incarnation (at the report's
// attempt, if it gives one), only where the handoff rule allows it, and only
// while the incarnation lives. A report of the state the execution is in
// already, by this incarnation, writes nothing and answers the same (a
// retry); after the end, only the report that ended it (the same result and
// message) is one, and another is refused (domain.ErrAlreadyTerminal). A terminal report on an execution not yet running records the
// start first. A refusal is a *domain.RuleError or wraps
// domain.ErrWorkerReplaced (409), ErrEnded (401) or, for a result larger
// than Config.MaxResultBytes, domain.ErrResultTooLarge (413); nothing is
// written.
func (s *Service) Report(ctx context.Context, x Session, r Report) (ReportResult, error) {
	if err := CheckReport(r); err != nil {
		return ReportResult{}, err
	}
	if err := domain.CheckResult(r.Result, s.cfg.MaxResultBytes); err != nil {
		return ReportResult{}, fmt.Errorf("report on %s: %w", clip(r.Execution), err)
	}
	ss := x.s
	s.mu.Lock()
	if ss.ended {
		s.mu.Unlock()
		return ReportResult{}, ErrEnded
	}
	var timeout time.Duration
	var known *domain.Execution // a stale state only costs a reload: the append expects its version
	if a := ss.assigned[r.Execution]; a != nil {
		timeout = time.Duration(a.TimeoutSeconds * float64(time.Second))
		known, a.x = a.x, nil
	}
	s.mu.Unlock()
	name, inc := ss.name, ss.inc
	for round := 0; round < 2; round++ {
		startFirst := false
		held := 0 // the attempt of the handoff the decision holds (the guard's run)
		xs, err := repository.UpdateExecutionGuarded(ctx, s.cfg.Store, r.Execution, domain.OwnerWorker, name, known, s.guard(ss, r.Execution, &held),
			func(x *domain.Execution) (domain.Event, error) {
				startFirst = false
				if x.Worker() == name && x.Incarnation() == inc && (r.Attempt == 0 || r.Attempt == x.Attempt()) && string(x.Status()) == r.Status {
					if err := sameEnd(x, name, r); err != nil {
						return nil, err
					}
					return nil, nil // reported already: a retry
				}
				attempt := r.Attempt
				if attempt == 0 {
					attempt = x.Attempt()
				}
				if err := x.Holds(name, inc, attempt); err != nil {
					return nil, err
				}
				held = attempt
				if x.Status() == domain.StatusScheduled && r.Status != ReportRunning && r.Status != ReportCancelled {
					startFirst = true
					return x.Start(name)
				}
				return decide(x, name, r, timeout)
			})
		if err != nil {
			if errors.Is(err, domain.ErrNotFound) {
				return ReportResult{}, fmt.Errorf("%w: %w", ErrNotHanded, err)
			}
			if repository.Unavailable(err) {
				return ReportResult{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
			}
			return ReportResult{}, err
		}
		known = xs
		if startFirst {
			continue
		}
		s.reported(ss, r.Execution, xs)
		return ReportResult{Execution: r.Execution, Status: string(xs.Status())}, nil
	}
	return ReportResult{}, fmt.Errorf("report on %s: the start was recorded but the end was not decided", r.Execution)
}

// sameEnd refuses report r on x, which ended (or runs) as r says, unless
// r is the report that ended it: the same result and, for a failure or a
// cancellation that gives one, the same message. Only the same report
// again is a retry; another is a conflict (domain.ErrAlreadyTerminal).
func sameEnd(x *domain.Execution, writer string, r Report) error {
	if !x.Status().Terminal() {
		return nil
	}
	st := x.State()
	same := sameJSON(st.Result, r.Result)
	switch r.Status {
	case ReportFailed:
		msg := r.Error
		if msg == "" {
			msg = "the worker reported a failure"
		}
		ev, _ := x.Fail(domain.OwnerWorker, writer, msg, nil) // the message as the log keeps it
		same = same && ev.Error == st.Error
	case ReportCancelled:
		if r.Error != "" {
			ev, _ := x.Cancel(domain.OwnerWorker, writer, r.Error)
			same = same && ev.Reason == st.Error
		}
	}
	if !same {
		return fmt.Errorf("execution %s ended %s with another result or message: only the same report again is a retry: %w", x.ID(), x.Status(), domain.ErrAlreadyTerminal)
	}
	return nil
}

// sameJSON reports whether a and b hold the same JSON value (an absent
// value and null are the same); key order and white space do not count.
func sameJSON(a, b json.RawMessage) bool {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if isNull(a) || isNull(b) {
		return isNull(a) && isNull(b)
	}
	if bytes.Equal(a, b) {
		return true
	}
	va, erra := decodeValue(a)
	vb, errb := decodeValue(b)
	return erra == nil && errb == nil && reflect.DeepEqual(va, vb)
}

func isNull(v []byte) bool { return len(v) == 0 || string(v) == "null" }

func decodeValue(v []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var out any
	err := dec.Decode(&out)
	return out, err
}

// ErrNotHanded is the refusal of a report on an execution that does not exist (409).
var ErrNotHanded = errors.New("no execution of that id was handed to this incarnation")

// ErrUnavailable wraps a report's error when the log could not be written:
// the report may or may not have landed, and sending it again is safe.
var ErrUnavailable = errors.New("the log is not available now")

// decide returns the event of report r on x (running, held by writer).
func decide(x *domain.Execution, writer string, r Report, timeout time.Duration) (domain.Event, error) {
	switch r.Status {
	case ReportRunning:
		return x.Start(writer)
	case ReportCompleted:
		return x.Complete(domain.OwnerWorker, writer, r.Result)
	case ReportFailed:
		msg := r.Error
		if msg == "" {
			msg = "the worker reported a failure"
		}
		return x.RetryOr(x.Fail(domain.OwnerWorker, writer, msg, r.Result)) // run_failed when the retry policy allows another run
	case ReportTimedOut:
		ev, err := x.TimeOut(writer, timeout)
		ev.Result = r.Result
		return x.RetryOr(ev, err)
	default: // cancelled
		reason := r.Error
		if reason == "" {
			reason = x.CancelReason()
		}
		ev, err := x.Cancel(domain.OwnerWorker, writer, reason)
		if x.CancelRequested() {
			ev.Code = domain.CancelRequested
		}
		ev.Result = r.Result
		return ev, err
	}
}

// reported marks an assignment reported on (polls no longer return it) or,
// once it ended, forgets it.
func (s *Service) reported(ss *session, id string, x *domain.Execution) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := ss.assigned[id]
	if a == nil {
		return
	}
	a.reported, a.x = true, x
	if x.Status() == domain.StatusRunning && x.Attempt() == a.Attempt {
		s.startedLocked(ss, a, time.Now()) // its deadline runs from here
	}
}

// guard fences a session's execution writes with its worker stream: the
// append carries the condition that the stream is at the version the
// session last saw, which shows its incarnation alive; a lost verdict or a
// new registration written meanwhile fails it atomically, and the stream is
// read again. Without atomic multi-stream appends the first write of the
// run of execution id at *attempt (the handoff the decision holds) follows
// a heartbeat of the incarnation's own instead (serialfence.go), and the
// execution's version and Holds decide the rest, as for an in-process
// worker.
func (s *Service) guard(ss *session, id string, attempt *int) repository.Guard {
	return func(ctx context.Context, fresh bool) (eventstore.StreamAppend, error) {
		s.mu.Lock()
		st, ended := ss.state, ss.ended
		s.mu.Unlock()
		if ended {
			return eventstore.StreamAppend{}, fmt.Errorf("worker %s incarnation %s: %w", ss.name, ss.inc, domain.ErrWorkerReplaced)
		}
		if !s.fenced {
			return eventstore.StreamAppend{}, s.fenceRun(ctx, ss, id, *attempt)
		}
		if st == nil || fresh {
			var err error
			if st, err = repository.RefreshWorker(ctx, s.cfg.Store, ss.name, st); err != nil {
				return eventstore.StreamAppend{}, err
			}
			s.mu.Lock()
			if ss.state == nil || ss.state.Version() < st.Version() {
				ss.state = st
			}
			s.mu.Unlock()
		}
		if st.Incarnation() != ss.inc || (st.Status() != domain.WorkerActive && st.Status() != domain.WorkerDrainingStatus) {
			return eventstore.StreamAppend{}, fmt.Errorf("worker %s incarnation %s: its stream says incarnation %s, %s: %w",
				ss.name, ss.inc, st.Incarnation(), st.Status(), domain.ErrWorkerReplaced)
		}
		return eventstore.StreamAppend{Stream: domain.WorkerStream(ss.name), Expected: repository.Expected(st.Version())}, nil
	}
}
