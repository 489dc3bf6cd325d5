package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// client speaks to one management API as one user. Its methods are safe
// for concurrent use (it is immutable after newClient); brokerctl makes
// one request at a time.
type client struct {
	base       *url.URL // scheme, host and path prefix; no user info
	user, pass string
	http       *http.Client
}

// maxErrorBody bounds how much of a non-JSON error answer is kept.
const maxErrorBody = 512

func newClient(base *url.URL, user, pass string) *client {
	return &client{base: base, user: user, pass: pass, http: &http.Client{}}
}

// apiPath is the path of an API resource below the base URL: "api" and the
// segments, each escaped ("/" becomes %2F, so the default vhost is
// "api/queues/%2F").
func apiPath(segs ...string) string {
	var b strings.Builder
	b.WriteString("api")
	for _, s := range segs {
		b.WriteByte('/')
		b.WriteString(url.PathEscape(s))
	}
	return b.String()
}

// request is one call to the API.
type request struct {
	method string
	path   string // from apiPath, may end with "?query"
	body   []byte // nil: no body
	header http.Header
}

// do sends r and returns the body of a 2xx answer. Any other answer is an
// *apiError; no answer is a *transportError.
func (c *client) do(ctx context.Context, r request) ([]byte, error) {
	u := strings.TrimSuffix(c.base.String(), "/") + "/" + r.path
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, fmt.Errorf("build request %s %s: %w", r.method, r.path, err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	req.SetBasicAuth(c.user, c.pass)
	if r.method == http.MethodGet {
		// Only for GET: RabbitMQ answers a DELETE of a queue's contents
		// 406 Not Acceptable when asked for JSON.
		req.Header.Set("Accept", "application/json")
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportErr(ctx, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, c.transportErr(ctx, fmt.Errorf("read answer to %s %s: %w", r.method, r.path, err))
	}
	if resp.StatusCode/100 == 2 {
		return data, nil
	}
	return nil, decodeAPIError(r, resp.StatusCode, data)
}

func (c *client) transportErr(ctx context.Context, err error) error {
	var ne net.Error
	timeout := errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
	return &transportError{url: c.base.String(), err: err, timeout: timeout}
}

// decodeAPIError reads RabbitMQ's error body, {"error":..., "reason":...}.
// The reason is usually a string, HTML-escaped by the management plugin
// ("&lt;&lt;" for "<<"), which is undone; a reason that is not a string
// (an Erlang term as JSON) is kept as compact JSON.
func decodeAPIError(r request, status int, data []byte) error {
	e := &apiError{method: r.method, path: r.path, status: status, body: data}
	var body struct {
		Error  string          `json:"error"`
		Reason json.RawMessage `json:"reason"`
	}
	if err := json.Unmarshal(data, &body); err == nil {
		var s string
		if err := json.Unmarshal(body.Reason, &s); err == nil {
			e.reason = strings.TrimSpace(html.UnescapeString(s))
		} else if len(body.Reason) > 0 {
			e.reason = string(body.Reason)
		}
		if e.reason == "" {
			e.reason = body.Error
		}
		return e
	}
	text := strings.TrimSpace(string(data))
	if len(text) > maxErrorBody {
		text = text[:maxErrorBody] + "..."
	}
	e.reason = text
	return e
}

// get decodes the JSON answer to GET path into out. Numbers are kept as
// json.Number, so that integers print as the server wrote them.
func (c *client) get(ctx context.Context, path string, out any) error {
	data, err := c.do(ctx, request{method: http.MethodGet, path: path})
	if err != nil {
		return err
	}
	return decodeJSON(data, path, out)
}

func decodeJSON(data []byte, path string, out any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return failf(ExitSoftware, "decode the answer to GET %s: %v", path, err)
	}
	return nil
}

// send sends a JSON body (nil: none) with method to path.
func (c *client) send(ctx context.Context, method, path string, body any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("encode %s %s: %w", method, path, err)
		}
	}
	_, err := c.do(ctx, request{method: method, path: path, body: data})
	return err
}

// exists reports whether GET path answers 2xx (false on 404).
func (c *client) exists(ctx context.Context, path string) (bool, error) {
	_, err := c.do(ctx, request{method: http.MethodGet, path: path})
	if err == nil {
		return true, nil
	}
	if isAPIStatus(err, http.StatusNotFound) {
		return false, nil
	}
	return false, err
}
