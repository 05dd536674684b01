// Package wire holds the JSON documents of turnstile's HTTP API (API.md):
// the bodies its routes accept and answer, and the messages of its feeds.
// The server encodes them and the Go client decodes them; the package
// imports nothing but the standard library, so a client links none of the
// server's internals. A field's JSON name is part of the API: renaming one
// is a change users see.
package wire
