// Package client is a typed Go client of turnstile's HTTP API (API.md):
// actions and their policies, executions (request, read, list, cancel,
// wait for the end), queues and their statistics, workers, the log's
// replay pages, and the live feeds, which resume after a dropped
// connection with Last-Event-ID.
//
// Every method takes a context and sends one request (the feeds and Wait
// hold theirs open). An answer other than 2xx is returned as a *Problem,
// the API's problem document; classify it with errors.As or the helpers
// IsNotFound, IsConflict, IsInvalid, IsRateLimited, IsUnauthorized and
// IsForbidden. Network errors are returned as they come from the
// *http.Client, wrapped with the request they belong to.
//
// The documents the API sends and accepts are the types of package
// client/wire; this package imports nothing else of turnstile's, so a
// program built on it links none of the server.
package client
