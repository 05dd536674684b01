package runner

import (
	"encoding/json"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to every input decoder. None may panic;
// input that is not valid JSON must be refused by all of them; and whatever a
// decoder accepts must satisfy the validation it promises.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		``, `null`, `{}`, `[]`, `"x"`, `1`, `{"a":1}`, `{} {}`, `{"a":`,
		`{"seconds":0.25}`, `{"seconds":-1}`, `{"seconds":1e309}`, `{"seconds":"1"}`, `{"Seconds":1}`,
		`{"seconds":1,"seconds":2}`, `{"seconds":null}`,
		`{"message":"boom"}`, `{"message":1}`, `{"message":"x","extra":true}`,
		`{"command":"/bin/echo","args":["hi"],"env":{"A":"b"},"dir":"/tmp"}`,
		`{"command":"./x"}`, `{"command":"echo","env":{"A=B":"c"}}`, `{"command":"echo","env":{"PATH":""}}`,
		`{"command":"echo","args":"hi"}`, `{"command":"a\u0000b"}`,
		`{"method":"post","url":"https://example.com/x?y=1","headers":{"A":["1","2"]},"body":{"k":[1]}}`,
		`{"url":"ftp://x"}`, `{"url":"http://x","body":"raw"}`, `{"url":"http://x","headers":{"Host":["a","b"]}}`,
		`{"url":"http://x","headers":{"A":null}}`, `{"url":"http://[::1"}`, `{"method":"TRACE","url":"http://x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		valid := json.Valid(data)

		if s, err := decodeSleep(data); err == nil {
			if !valid {
				t.Fatalf("decodeSleep accepted invalid JSON %q", data)
			}
			if !(s >= 0 && s <= MaxSleep.Seconds()) {
				t.Fatalf("decodeSleep(%q) = %v, out of range", data, s)
			}
		}

		if msg, err := decodeFail(data); err == nil {
			if !valid {
				t.Fatalf("decodeFail accepted invalid JSON %q", data)
			}
			if msg == "" {
				t.Fatalf("decodeFail(%q) gave an empty message", data)
			}
		}

		if obj, err := decodeEcho(data); err == nil {
			if !valid || !json.Valid(obj) || obj[0] != '{' {
				t.Fatalf("decodeEcho(%q) = %q", data, obj)
			}
		}

		if in, err := decodeShellConfig(data); err == nil {
			if !valid {
				t.Fatalf("decodeShellConfig accepted invalid JSON %q", data)
			}
			if in.Command == "" {
				t.Fatalf("decodeShellConfig(%q) accepted an empty command", data)
			}
			for k, v := range in.Env {
				if checkEnvVar(k, v) != nil {
					t.Fatalf("decodeShellConfig(%q) accepted env %q=%q", data, k, v)
				}
			}
		}

		if req, err := decodeHTTP(data); err == nil {
			if !valid {
				t.Fatalf("decodeHTTP accepted invalid JSON %q", data)
			}
			if !slices.Contains(httpMethods, req.method) {
				t.Fatalf("decodeHTTP(%q) accepted method %q", data, req.method)
			}
			if req.url == nil || (req.url.Scheme != "http" && req.url.Scheme != "https") || req.url.Host == "" {
				t.Fatalf("decodeHTTP(%q) accepted url %v", data, req.url)
			}
			for name, values := range req.header {
				for _, v := range values {
					if !validHeaderName(name) || !validHeaderValue(v) {
						t.Fatalf("decodeHTTP(%q) accepted header %q: %q", data, name, v)
					}
				}
			}
		}
	})
}

// TestDecodeStrict checks the strict decoder directly.
func TestDecodeStrict(t *testing.T) {
	t.Parallel()
	type target struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	tests := []struct {
		input   string
		wantErr bool
	}{
		{`{"a":1,"b":"x"}`, false},
		{` {"a":1} `, false},
		{`{}`, false},
		{`{"a":null}`, false},
		{`{"c":1}`, true},
		{`{"A":1}`, true},
		{`{"a":1,"a":2}`, true},
		{`{"a":"1"}`, true},
		{`{"a":1}{}`, true},
		{`{"a":1} 2`, true},
		{`{"a":1`, true},
		{`[]`, true},
		{`null`, true},
		{``, true},
		{`   `, true},
		{`{"a":1,}`, true},
	}
	for _, tt := range tests {
		var dst target
		err := decodeStrict([]byte(tt.input), &dst, "a", "b")
		if (err != nil) != tt.wantErr {
			t.Errorf("decodeStrict(%q) = %v, want error %v", tt.input, err, tt.wantErr)
		}
	}
}

// FuzzRunnerConfig feeds arbitrary bytes to the runner_config decoders and
// to core.shell's input decoder under a config: none may panic, and what
// they accept keeps their promises.
func FuzzRunnerConfig(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"url":"https://api.example.com/v1/","methods":["GET","post"],"allow_private":true}`,
		`{"url":"ftp://x/"}`, `{"url":"https://x/?q=1"}`, `{"methods":["TRACE"]}`,
		`{"command":"/bin/echo","args":["a"],"env":{"A":"b"},"dir":"/tmp","input_args":true}`,
		`{"args":["x"]}`, `{"command":"/bin/sh"}`, `{"env":{"PATH":"/tmp"}}`, `{"dir":"/"}`, `{"args":null}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := decodeHTTPConfig(data); err == nil {
			if c.base != nil && ((c.base.Scheme != "http" && c.base.Scheme != "https") || c.base.Host == "" || c.base.RawQuery != "") {
				t.Fatalf("decodeHTTPConfig(%q) accepted url %v", data, c.base)
			}
			for _, m := range c.methods {
				if !slices.Contains(httpMethods, m) {
					t.Fatalf("decodeHTTPConfig(%q) accepted method %q", data, m)
				}
			}
		}
		if c, err := decodeShellConfig(data); err == nil && c.Command == "" {
			t.Fatalf("decodeShellConfig(%q) accepted an empty command", data)
		}
		for _, inputArgs := range []bool{false, true} {
			in, err := decodeShellInput(shellConfig{Command: "/bin/echo", InputArgs: inputArgs}, data)
			if err != nil {
				continue
			}
			if in.Command != "" || in.Env != nil || in.Dir != "" || (!inputArgs && in.Args != nil) {
				t.Fatalf("decodeShellInput(%q, input_args %v) let the input choose %+v", data, inputArgs, in)
			}
		}
	})
}

// FuzzJoinPath: whatever path an input gives, the URL core.http requests
// lies under the definition's url.
func FuzzJoinPath(f *testing.F) {
	for _, seed := range []string{"", "users/1", "a?b=c", "../x", "%2e%2e/x", "..%2fx", "/x", "//evil/x",
		"http://evil/", "a/./b", "a%2F..%2F..%2Fb", "a\\b", "a#f", ";x", "%", "a/%2e", "%252e%252e/x", "a%252fb"} {
		f.Add(seed)
	}
	base, _ := url.Parse("https://api.example.com/v1/")
	f.Fuzz(func(t *testing.T, p string) {
		u, err := joinPath(base, p)
		if err != nil {
			return
		}
		if checkUnder(u, base) != nil || u.Host != base.Host || u.Scheme != base.Scheme || u.User != nil {
			t.Fatalf("joinPath(%q) = %v, outside %v", p, u, base)
		}
		// What is sent is what was checked: parsing the request line again
		// keeps it under the url.
		again, err := url.Parse(u.String())
		if err != nil || checkUnder(again, base) != nil {
			t.Fatalf("joinPath(%q) = %q, which parses back as %v (%v)", p, u.String(), again, err)
		}
		for _, seg := range strings.Split(again.Path, "/") {
			if seg == "." || seg == ".." {
				t.Fatalf("joinPath(%q) = %q has a %q segment", p, u.String(), seg)
			}
		}
	})
}
