//go:build !race

package kurrentdb

const raceEnabled = false
