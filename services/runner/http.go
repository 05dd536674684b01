package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// httpMethods are the methods core.http accepts (in any letter case).
var httpMethods = []string{
	http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions,
}

// httpRunner is core.http; its contract is in the package doc.
type httpRunner struct {
	client  *http.Client
	maxBody int
}

type headerValues []string

// UnmarshalJSON accepts a string or an array of strings.
func (h *headerValues) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return errors.New("a header value must be a string or an array of strings, not null")
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*h = headerValues{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("a header value must be a string or an array of strings")
	}
	*h = many
	return nil
}

type httpInput struct {
	Method       string                  `json:"method"`
	URL          string                  `json:"url"`
	Headers      map[string]headerValues `json:"headers"`
	Body         json.RawMessage         `json:"body"`
	FailOnStatus bool                    `json:"fail_on_status"`
}

type httpRequest struct {
	method       string
	url          *url.URL
	header       http.Header
	host         string
	body         []byte // nil: no body
	failOnStatus bool
}

type httpResult struct {
	Status        int                 `json:"status"`
	Headers       map[string][]string `json:"headers"`
	Body          string              `json:"body"`
	BodyTruncated bool                `json:"body_truncated,omitempty"`
}

// decodeHTTP decodes and validates core.http's input.
func decodeHTTP(input []byte) (httpRequest, error) {
	var in httpInput
	if err := decodeStrict(input, &in, "method", "url", "headers", "body", "fail_on_status"); err != nil {
		return httpRequest{}, err
	}
	req := httpRequest{method: strings.ToUpper(in.Method), header: make(http.Header), failOnStatus: in.FailOnStatus}
	if req.method == "" {
		req.method = http.MethodGet
	}
	if !slices.Contains(httpMethods, req.method) {
		return httpRequest{}, fmt.Errorf(`"method" %q is not one of %s`, in.Method, strings.Join(httpMethods, ", "))
	}

	if in.URL == "" {
		return httpRequest{}, errors.New(`"url" is required`)
	}
	u, err := url.Parse(in.URL)
	if err != nil {
		return httpRequest{}, fmt.Errorf(`"url": %w`, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return httpRequest{}, fmt.Errorf(`"url": scheme must be http or https, got %q`, u.Scheme)
	}
	if u.Host == "" {
		return httpRequest{}, errors.New(`"url": no host`)
	}
	req.url = u

	for name, values := range in.Headers {
		if !validHeaderName(name) {
			return httpRequest{}, fmt.Errorf(`"headers": invalid name %q`, name)
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				return httpRequest{}, fmt.Errorf(`"headers": invalid value for %q`, name)
			}
		}
		if http.CanonicalHeaderKey(name) == "Host" {
			if len(values) != 1 {
				return httpRequest{}, errors.New(`"headers": Host takes exactly one value`)
			}
			req.host = values[0]
			continue
		}
		for _, v := range values {
			req.header.Add(name, v)
		}
	}

	body := bytes.TrimSpace(in.Body)
	switch {
	case len(body) == 0 || string(body) == "null":
	case body[0] == '"':
		var s string
		if err := json.Unmarshal(body, &s); err != nil {
			return httpRequest{}, fmt.Errorf(`"body": %w`, err)
		}
		req.body = []byte(s)
	default:
		var buf bytes.Buffer
		if err := json.Compact(&buf, body); err != nil {
			return httpRequest{}, fmt.Errorf(`"body": %w`, err)
		}
		req.body = buf.Bytes()
		if req.header.Get("Content-Type") == "" {
			req.header.Set("Content-Type", "application/json")
		}
	}
	return req, nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s holds no control characters other than
// horizontal tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// Run sends the request the input describes; the contract is in the package doc.
func (r *httpRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameHTTP)
	}
	in, err := decodeHTTP(input)
	if err != nil {
		return nil, invalidInput(err)
	}
	var body io.Reader
	if in.body != nil {
		body = bytes.NewReader(in.body)
	}
	req, err := http.NewRequestWithContext(ctx, in.method, in.url.String(), body)
	if err != nil {
		return nil, invalidInput(err)
	}
	req.Header = in.header
	if in.host != "" {
		req.Host = in.host
	}
	target := in.method + " " + in.url.Redacted()

	resp, err := r.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, NameHTTP)
		}
		return nil, failf(nil, "core.http: %s: %w", target, err)
	}
	defer func() { _ = resp.Body.Close() }()

	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(r.maxBody)+1))
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctxError(ctx, NameHTTP)
		}
		return nil, failf(nil, "core.http: %s: read response body: %w", target, err)
	}
	truncated := len(data) > r.maxBody
	if truncated {
		data = data[:r.maxBody]
	}
	res := httpResult{
		Status:        resp.StatusCode,
		Headers:       resp.Header,
		Body:          boundedText(data, truncated),
		BodyTruncated: truncated,
	}
	if res.Headers == nil {
		res.Headers = map[string][]string{}
	}
	raw, err := json.Marshal(res)
	if err != nil {
		return nil, failf(nil, "core.http: encode result: %w", err)
	}
	if in.failOnStatus && resp.StatusCode >= 400 {
		return nil, failf(raw, "core.http: %s: status %s", target, resp.Status)
	}
	return raw, nil
}
