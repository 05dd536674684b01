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
	guarded *http.Client // refuses internal addresses
	open    *http.Client // for actions whose runner_config sets allow_private
	maxBody int
}

// newHTTPRunner returns core.http over clones of base's transport: one
// pool of connections for what every action may reach, another for the
// actions allowed internal addresses, so that no connection crosses over.
func newHTTPRunner(base *http.Client, maxBody int) *httpRunner {
	return &httpRunner{guarded: newHTTPClient(base, checkDialAddr), open: newHTTPClient(base, nil), maxBody: maxBody}
}

// httpConfig is core.http's runner_config.
type httpConfig struct {
	URL          string   `json:"url"`
	Methods      []string `json:"methods"`
	AllowPrivate bool     `json:"allow_private"`

	base    *url.URL // URL parsed; nil when the config fixes no url
	methods []string // Methods upper-cased; nil: any of httpMethods
}

// decodeHTTPConfig decodes and validates core.http's runner_config.
func decodeHTTPConfig(config []byte) (httpConfig, error) {
	var c httpConfig
	if err := decodeStrict(config, &c, "url", "methods", "allow_private"); err != nil {
		return c, fmt.Errorf("core.http runner_config: %w", err)
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		switch {
		case err != nil:
			return c, fmt.Errorf(`core.http runner_config: "url": %w`, err)
		case u.Scheme != "http" && u.Scheme != "https":
			return c, fmt.Errorf(`core.http runner_config: "url": scheme must be http or https, got %q`, u.Scheme)
		case u.Host == "":
			return c, errors.New(`core.http runner_config: "url": no host`)
		case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
			return c, errors.New(`core.http runner_config: "url": no query or fragment (a request's "path" may carry a query)`)
		}
		if _, err := pathSegments(u); err != nil {
			return c, fmt.Errorf(`core.http runner_config: "url": %w`, err)
		}
		c.base = u
	}
	if c.Methods != nil {
		c.methods = []string{}
		for _, m := range c.Methods {
			um := strings.ToUpper(m)
			if !slices.Contains(httpMethods, um) {
				return c, fmt.Errorf(`core.http runner_config: "methods": %q is not one of %s`, m, strings.Join(httpMethods, ", "))
			}
			c.methods = append(c.methods, um)
		}
	}
	return c, nil
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
	Path         *string                 `json:"path"`
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

// decodeHTTP decodes and validates core.http's input for an action that
// defines no runner_config.
func decodeHTTP(input []byte) (httpRequest, error) {
	return decodeHTTPWith(httpConfig{}, input)
}

// decodeHTTPWith decodes and validates core.http's input under config c.
func decodeHTTPWith(c httpConfig, input []byte) (httpRequest, error) {
	var in httpInput
	if err := decodeStrict(input, &in, "method", "url", "path", "headers", "body", "fail_on_status"); err != nil {
		return httpRequest{}, err
	}
	req := httpRequest{method: strings.ToUpper(in.Method), header: make(http.Header), failOnStatus: in.FailOnStatus}
	if req.method == "" {
		req.method = http.MethodGet
	}
	if !slices.Contains(httpMethods, req.method) {
		return httpRequest{}, fmt.Errorf(`"method" %q is not one of %s`, in.Method, strings.Join(httpMethods, ", "))
	}
	if c.methods != nil && !slices.Contains(c.methods, req.method) {
		return httpRequest{}, fmt.Errorf(`"method" %s is not allowed by the action's runner_config (methods %s)`, req.method, strings.Join(c.methods, ", "))
	}

	if c.base != nil {
		if in.URL != "" {
			return httpRequest{}, errors.New(`"url": the action's runner_config fixes the url; give a "path" relative to it`)
		}
		p := ""
		if in.Path != nil {
			p = *in.Path
		}
		u, err := joinPath(c.base, p)
		if err != nil {
			return httpRequest{}, fmt.Errorf(`"path": %w`, err)
		}
		req.url = u
	} else {
		if in.Path != nil {
			return httpRequest{}, errors.New(`"path" needs a "url" in the action's runner_config; give a full "url"`)
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
	}

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
			if c.base != nil {
				return httpRequest{}, errors.New(`"headers": Host is fixed by the action's runner_config url`)
			}
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

// joinPath returns base with the relative reference p appended to its
// path: p may carry a path and a query, never a scheme, a host, a leading
// "/", a "." or ".." segment (escaped or not) or a fragment, so the result
// always lies under base.
func joinPath(base *url.URL, p string) (*url.URL, error) {
	if p == "" {
		u := *base
		return &u, nil
	}
	if strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\\\x00") {
		return nil, fmt.Errorf("%q must be relative to the action's url (no leading '/', no backslash)", p)
	}
	rel, err := url.Parse(p)
	if err != nil {
		return nil, err
	}
	if rel.Scheme != "" || rel.Host != "" || rel.User != nil || rel.Opaque != "" || rel.Fragment != "" {
		return nil, fmt.Errorf("%q must be a relative path (no scheme, host or fragment)", p)
	}
	for _, seg := range strings.Split(rel.Path, "/") {
		if seg == "." || seg == ".." {
			return nil, fmt.Errorf("%q may not climb out of the action's url", p)
		}
	}
	u := *base
	u.Path = strings.TrimSuffix(base.Path, "/") + "/" + rel.Path
	u.RawPath = ""
	if rel.RawPath != "" {
		u.RawPath = strings.TrimSuffix(base.EscapedPath(), "/") + "/" + rel.RawPath
	}
	u.RawQuery, u.ForceQuery = rel.RawQuery, rel.ForceQuery
	if err := checkUnder(&u, base); err != nil {
		return nil, fmt.Errorf("%q leaves the action's url: %w", p, err)
	}
	return &u, nil
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

// Run sends the request the input describes, with no runner_config: to a
// full url from the input, never an internal address.
func (r *httpRunner) Run(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
	return r.RunConfigured(ctx, nil, input)
}

// RunConfigured sends the request the input describes within what config
// allows; the contract is in the package doc.
func (r *httpRunner) RunConfigured(ctx context.Context, config, input json.RawMessage) (json.RawMessage, error) {
	if ctx.Err() != nil {
		return nil, ctxError(ctx, NameHTTP)
	}
	var c httpConfig
	if t := bytes.TrimSpace(config); len(t) != 0 && string(t) != "null" {
		var err error
		if c, err = decodeHTTPConfig(config); err != nil {
			return nil, &Failure{Message: "invalid runner_config: " + err.Error(), Err: err}
		}
	}
	in, err := decodeHTTPWith(c, input)
	if err != nil {
		return nil, invalidInput(err)
	}
	client := r.guarded
	if c.AllowPrivate {
		client = r.open
	}
	ctx = withReach(ctx, httpReach{allowPrivate: c.AllowPrivate, prefix: c.base})
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

	resp, err := client.Do(req)
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
