package domain_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// Example shows a plain execution's life: the executor accepts the request,
// the action's queue grants it a slot, the executor hands it to worker
// "w1", which starts and completes it. A late write by "w2" is refused by
// the handoff rule.
func Example() {
	policy := domain.Policy{Ref: "mail.send", Runner: "core.http", MaxConcurrent: 1}.WithDefaults()
	at := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

	// The action's queue, folded from the log.
	queues := domain.NewQueues()
	queues.Apply(&domain.Envelope{Stream: domain.ActionStream("mail.send"), Position: 1, Time: at},
		domain.ActionDefined{Policy: policy})

	x := domain.NewExecution("ex-1")
	var version uint64
	apply := func(ev domain.Event, err error) {
		if err != nil {
			panic(err)
		}
		x.Apply(ev, version, at)
		version++
		at = at.Add(time.Second)
		fmt.Printf("%-20s -> %s (owner now: %s)\n", ev.EventType(), x.Status(), x.Owner())
	}

	req, err := x.Request(domain.ExecutionRequested{Action: "mail.send", Input: json.RawMessage(`{"to":"ada@example.com"}`)})
	apply(req, err)
	queues.Apply(&domain.Envelope{Stream: domain.ExecutionStream("ex-1"), Position: 2, Time: at}, req)

	head := queues.Get("mail.send").Grantable(1, at)[0]
	fmt.Println("grantable:", head.Execution, queues.Get("mail.send").CheckGrant(head.Execution, head.Key, at))
	apply(x.Grant(head.Key))

	apply(x.Schedule("w1", "w1-boot-1", policy))
	apply(x.Start("w1"))

	// w2 was never handed this execution.
	_, err = x.Complete(domain.OwnerWorker, "w2", nil)
	fmt.Println("refused:", err)

	apply(x.Complete(domain.OwnerWorker, "w1", json.RawMessage(`{"sent":true}`)))

	// A late write after the end.
	_, err = x.Fail(domain.OwnerWorker, "w2", "timeout", nil)
	var re *domain.RuleError
	if errors.As(err, &re) {
		fmt.Println("refused:", re.Rule, errors.Is(err, domain.ErrAlreadyTerminal))
		fmt.Println(err)
	}
	st := x.State()
	fmt.Println(st.Status, st.Worker, st.Attempt, string(st.Result))

	// Output:
	// execution.requested  -> requested (owner now: executor)
	// grantable: ex-1 <nil>
	// execution.scheduling -> scheduling (owner now: executor)
	// execution.scheduled  -> scheduled (owner now: worker)
	// execution.running    -> running (owner now: worker)
	// refused: handoff rule "handoff": execution.completed by worker w2 refused for execution ex-1 in state running: attempt 1 was handed to worker "w1"
	// execution.completed  -> completed (owner now: )
	// refused: terminal true
	// handoff rule "terminal": execution.failed by worker w2 refused for execution ex-1 in state completed: no event follows a terminal one
	// completed w1 1 {"sent":true}
}
