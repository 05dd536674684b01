package wire

import (
	"encoding/json"
	"time"
)

// ScheduleRequest is the body of POST /api/v1/schedules.
type ScheduleRequest struct {
	Ref      string          `json:"ref"`
	Action   string          `json:"action"`
	Cron     string          `json:"cron"`
	Input    json.RawMessage `json:"input,omitempty"`
	Timezone string          `json:"timezone,omitempty"`
}

// Schedule is a schedule's state; GET /api/v1/schedules/{ref} adds its
// recent ticks.
type Schedule struct {
	Ref      string          `json:"ref"`
	Action   string          `json:"action"`
	Cron     string          `json:"cron"`
	Input    json.RawMessage `json:"input,omitempty"`
	Timezone string          `json:"timezone"`
	Paused   bool            `json:"paused"`
	// Since: ticks at or before it are never requested (its definition or
	// last resume); LastTick: the latest tick whose execution the log holds.
	Since    time.Time      `json:"since"`
	LastTick *time.Time     `json:"last_tick,omitempty"`
	Ticks    []ScheduleTick `json:"ticks,omitempty"`
}

// ScheduleTick is one of a schedule's recent ticks: its time, the id of
// the execution it requests, and that execution's status ("" when the log
// holds no such execution: the tick was missed, or is not requested yet).
type ScheduleTick struct {
	At        time.Time `json:"at"`
	Execution string    `json:"execution"`
	Status    string    `json:"status,omitempty"`
}

// ScheduleList is the body of GET /api/v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}
