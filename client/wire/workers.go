// Workers: the workers the log knows.
package wire

import "time"

// Worker is a worker as the API shows it.
type Worker struct {
	ID          string     `json:"id"`
	Status      string     `json:"status"`
	Incarnation string     `json:"incarnation,omitempty"`
	Slots       int        `json:"slots"`
	Runners     []string   `json:"runners,omitempty"`
	LastSeen    *time.Time `json:"last_heartbeat,omitempty"`
	InFlight    int        `json:"in_flight"`
	Executions  []string   `json:"executions"`
}

// WorkerList is a page of GET /api/v1/workers, sorted by id; Next is the
// after= of the next page ("" on the last one).
type WorkerList struct {
	Workers []Worker `json:"workers"`
	Next    string   `json:"next"`
	// UnservedRunners are the runners of defined actions that no active
	// worker serves (their executions wait), sorted.
	UnservedRunners []string `json:"unserved_runners"`
}
