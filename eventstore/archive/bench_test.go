package archive

import (
	"bytes"
	"os"
	"testing"
)

// BenchmarkDecodeLine decodes the lines of TURNSTILE_ARCHIVE_LINES (a
// segment's lines, gzip -dc) one after the other.
func BenchmarkDecodeLine(b *testing.B) {
	data, err := os.ReadFile(os.Getenv("TURNSTILE_ARCHIVE_LINES"))
	if err != nil {
		b.Skip("TURNSTILE_ARCHIVE_LINES names no file")
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := decodeLine(lines[i%len(lines)]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendLine(b *testing.B) {
	data, err := os.ReadFile(os.Getenv("TURNSTILE_ARCHIVE_LINES"))
	if err != nil {
		b.Skip("TURNSTILE_ARCHIVE_LINES names no file")
	}
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	e, _ := decodeLine(lines[0])
	var buf []byte
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		buf = appendLine(buf[:0], &e)
	}
}
