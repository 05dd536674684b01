package wire

import (
	"bytes"
	"encoding/json"
)

// ResourceNeed is a resource an action's executions hold while they hold
// their slot: in a policy's "resources", "name" or {"name","units"}.
type ResourceNeed struct {
	Name  string `json:"name"`
	Units int    `json:"units,omitempty"` // default 1
}

// UnmarshalJSON reads "name" or {"name","units"}.
func (n *ResourceNeed) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '"' {
		*n = ResourceNeed{}
		return json.Unmarshal(t, &n.Name)
	}
	type plain ResourceNeed
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*n = ResourceNeed(p)
	return nil
}

// ResourceDefinition is the body of PUT /api/v1/resources/{name}: at least
// one of MaxConcurrent and RateLimit; KeyField makes the limit apply per
// value of that top-level input field, across every action using it.
type ResourceDefinition struct {
	MaxConcurrent int        `json:"max_concurrent,omitempty"`
	RateLimit     *RateLimit `json:"rate_limit,omitempty"`
	KeyField      string     `json:"key_field,omitempty"`
}

// Resource is a resource's limit and use: units in use and executions
// waiting for it, in all and per key value (busiest first, paged).
type Resource struct {
	Name          string        `json:"name"`
	MaxConcurrent int           `json:"max_concurrent,omitempty"`
	RateLimit     *RateLimit    `json:"rate_limit,omitempty"`
	KeyField      string        `json:"key_field,omitempty"`
	InUse         int           `json:"in_use"`
	Waiting       int           `json:"waiting"`
	Keys          []ResourceKey `json:"keys"`
	// NextCursor, when set, fetches the next page of Keys (?cursor=).
	NextCursor string `json:"next_cursor,omitempty"`
}

// ResourceKey is one key value's use of a resource ("" for an unkeyed one).
type ResourceKey struct {
	Key     string `json:"key"`
	InUse   int    `json:"in_use"`
	Waiting int    `json:"waiting"`
}

// ResourceList is the answer of GET /api/v1/resources.
type ResourceList struct {
	Resources []Resource `json:"resources"`
}
