// Package layout has no code: its test derives the module's import graph
// and fails on any arrow against the layout table in DESIGN.md.
package layout
