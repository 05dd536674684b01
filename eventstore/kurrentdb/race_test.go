//go:build race

package kurrentdb

// raceEnabled: the race detector slows the fake server and the client's gRPC
// tenfold, too much for the suite's slow checks within their time limit.
const raceEnabled = true
