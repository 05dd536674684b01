package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client talks to one turnstile server. It is safe for concurrent use.
type Client struct {
	base      string // scheme://host[/prefix], no trailing slash
	token     string
	http      *http.Client
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as the bearer token of every request
// (Authorization: Bearer …). Without it requests are anonymous.
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithHTTPClient sends the requests through hc (its transport, TLS
// configuration, proxy). A timeout set on hc also bounds the feeds and
// Wait, which hold a request open: prefer deadlines on the context.
// The default is a client of its own with no timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.http = hc } }

// WithUserAgent sets the User-Agent header of every request.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client of the server at baseURL, an http:// or https://
// URL such as "http://127.0.0.1:8080" (a path prefix is kept, for a server
// behind a proxy that mounts it under one).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: server %q must be an http:// or https:// URL", baseURL)
	}
	c := &Client{base: strings.TrimRight(u.String(), "/"), http: &http.Client{}, userAgent: "turnstile-go-client"}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		c.http = &http.Client{}
	}
	return c, nil
}

// BaseURL returns the server's URL as New was given it (no trailing slash).
func (c *Client) BaseURL() string { return c.base }

// request is one call of the API.
type request struct {
	method string
	path   string // escaped, from /
	query  url.Values
	body   any // sent as JSON when not nil
	header http.Header
}

// newRequest builds the HTTP request of r.
func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	var rd io.Reader
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("%s %s: encode the body: %w", r.method, r.path, err)
		}
		rd = bytes.NewReader(b)
	}
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	if r.body != nil || r.method != http.MethodGet {
		// a body-less POST says JSON too: the server refuses other types
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	return req, nil
}

// maxAnswer bounds the body of an answer the client reads whole.
const maxAnswer = 64 << 20

// do sends r and returns the answer's status, headers and body when it is
// 2xx; any other status is a *Problem.
func (c *Client) do(ctx context.Context, r request) (*http.Response, []byte, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, nil, err
	}
	resp, err := c.http.Do(req) // its errors name the method and URL
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, fmt.Errorf("%s %s: read the answer: %w", r.method, r.path, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp, data, problemOf(resp, data)
	}
	return resp, data, nil
}

// call sends r and decodes a 2xx answer into out (when not nil).
func (c *Client) call(ctx context.Context, r request, out any) (*http.Response, error) {
	resp, data, err := c.do(ctx, r)
	if err != nil {
		return resp, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp, fmt.Errorf("%s %s: the answer is not the document expected: %w", r.method, r.path, err)
		}
	}
	return resp, nil
}

// Raw sends a request to path (from /, with its query) and returns the body
// of a 2xx answer as the server wrote it; body, when not nil, is sent as
// JSON. Any other answer is a *Problem. It is for documents this package
// has no method for, and for tools that print the server's JSON.
func (c *Client) Raw(ctx context.Context, method, path string, body any) (json.RawMessage, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, errors.New("client: Raw: the path must start with /")
	}
	p, q, _ := strings.Cut(path, "?")
	query, err := url.ParseQuery(q)
	if err != nil {
		return nil, fmt.Errorf("client: Raw: %w", err)
	}
	_, data, err := c.do(ctx, request{method: method, path: p, query: query, body: body})
	return data, err
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }
