// Problem: the one shape of every error the API answers.
package wire

import "fmt"

// Problem is an RFC 9457 problem document (application/problem+json).
// Type tells errors apart without parsing Detail.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func (p *Problem) Error() string { return fmt.Sprintf("%d %s: %s", p.Status, p.Title, p.Detail) }
