package codec_test

import "github.com/turnstile/turnstile/internal/valuediff"

// sameValue compares two decoded payloads (see valuediff.Diff).
func sameValue(a, b any) string { return valuediff.Diff(a, b) }
