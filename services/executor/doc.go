// Package executor runs the executor: it folds the log into queues, live
// executions and workers, and appends its decisions (rejections, slot grants
// and handoffs, expiries, abandonments, lost-worker verdicts, pre-handoff
// cancellations, queue timeouts, with_items fan-out) with expected versions,
// so a replaced executor that still runs fails to write instead of
// over-granting, and a race with a worker is decided by the log: exactly one
// side's append wins, the other gives up and says so in its log. The command
// side the API uses is package services/command.
//
// Time-based rules compare the executor's clock (Config.Clock) with the log
// times of events (a handoff's, a worker's last event, a waiter's request,
// recent grants), never with a worker's clock. The rate limit is judged on
// log times too: the executor's clock must not run ahead of the store's
// commit clock (it does not when both are the same machine's clock).
//
// # On a store without atomic multi-stream appends
//
// KurrentDB appends to one stream per call (eventstore.AtomicMultiStream
// reports false). The executor then writes each decision that spans
// several streams one stream at a time: first the append that fences the
// decision, at the expected version that makes it safe against other
// writers, then the others, whose event ids derive from the fence event's id
// (so a retry, or a restarted executor of the same name completing them, is
// recognised by id). A crash between the appends leaves a partial write that
// the fold shows and that the next cycles complete, whoever wrote the fence
// (after two timed cycles, so a writer still at work finishes first). The
// projections and the audit accept these partial states. Decision by
// decision:
//
//   - Grant (queue.granted on queue-<ref>, then execution.scheduling and
//     execution.scheduled on each granted execution). Fenced by the queue
//     stream's version, as before: two executors never both grant from one
//     queue state, so the limit and FIFO hold. Partial: the grant holds its
//     slot and the execution stays requested (projections.State.Unscheduled);
//     repaired by a handoff to a free worker at the execution's current
//     version. An execution asked to cancel meanwhile is cancelled instead,
//     which frees the slot. The queue stream does not fence an execution's
//     own stream: a grant decided on a stale fold can land after the
//     waiter's cancellation (another executor's, or a queue timeout); such a
//     grant is void, takes no slot, and the audit counts it apart.
//   - Fan-out of a with_items parent (execution.children_requested on the
//     parent, then each child's execution.requested at "no stream", in item
//     order). Fenced by the parent's version, which serialises fan-out with
//     cancellation requests and the parent's end. Partial: announced
//     children without a stream; nothing else is decided for the parent
//     until they exist; repaired by requesting them in item order (also
//     after a cancellation request, since they were announced before it:
//     they are then asked to cancel). The parent cannot end before them.
//   - Lost worker (worker.lost, plus execution.abandoned for each execution
//     it holds). Here the abandonments come first, each fenced by its
//     execution's version against the worker's own writes, and the verdict
//     last, fenced by the worker stream's version against its heartbeats; a
//     worker write in between stops the chain before the verdict. So once
//     the verdict is in the log, everything the incarnation held has been
//     taken back, and no write of it passes the handoff rule after the
//     verdict. Partial: abandonments without a verdict; the abandoned
//     executions are handed again as after an expiry, and the verdict is
//     decided again from the worker's lease. No verdict is decided while a
//     handoff of this executor's to that worker is not folded yet.
//   - Action change, by the command side (action.* on action-<ref> with
//     queue.action_changed on queue-<ref>). Here queue.action_changed comes
//     first and carries the action event (an announcement); it moves the
//     grant fence before the change exists, and the executor grants nothing
//     from a queue with an announced change missing from the action stream
//     (projections.State.Announced), so no grant is ever decided on a policy
//     older than the one in force at its position. The action event follows
//     at the action's expected version, which serialises changes. Partial:
//     an announcement without its event; repaired by the executor appending
//     the announced envelope as prepared (same id and writer), so the API's
//     own late append is an idempotent replay. So a change whose command
//     failed after its announcement (an unknown outcome, as ever) may still
//     apply a little later, and a command that found nothing to change in
//     between (a resume of an action whose announced pause is not written
//     yet) does not undo it.
//   - Everything else the executor writes (rejections, reschedules, handoff
//     expiries, abandonments outside a verdict, pre-handoff and queue-timeout
//     cancellations, failures after max_attempts, a parent's start and end,
//     cancellation requests to children) and everything workers and the API
//     write (requests, cancellation requests, running and the ends, worker
//     registrations and heartbeats) is one stream's append with an expected
//     version already, and is written the same way on every store.
//
// The step-wise API works the same way: a Decision holds the whole op and
// Commit writes its appends one stream at a time; "two timed cycles" are two
// calls of Decide(true). Snapshots of the fold carry its partial writes
// (projections.StateSnapshot), so a restarted executor completes them too.
// The simulation (package sim) runs the executor on such a log
// (sim.Config.SingleStream), where the log's faults cut these chains short.
//
// Not covered by any fence, on either kind of store: two executors that run
// at once can still hand an execution to a worker the other has just
// declared lost (its verdict only waits for this executor's own handoffs);
// run one active executor per log, the others as fail-over.
package executor
