// Package apiclient is a Go client of agentplane's HTTP run API. It depends
// on the standard library only. Streams resume by themselves: when a
// connection drops, Follow reconnects with Last-Event-ID and the caller sees
// every event exactly once, in order.
package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one agentplane server as one principal. It is safe for
// concurrent use.
type Client struct {
	// BaseURL is the server, e.g. http://127.0.0.1:8080.
	BaseURL string
	// Token is an API key (ap_...) or a JWT.
	Token string
	// HTTP is the client used (default http.DefaultClient). Streams need a
	// client without an overall timeout.
	HTTP *http.Client
	// RetryWait is the pause before a stream reconnects (default 500ms).
	RetryWait time.Duration
}

// New returns a client of the server at baseURL with the bearer token.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token}
}

// Error is an error answer of the API.
type Error struct {
	Status int
	ErrorBody
	// RetryAfter is the Retry-After of a 429, when given.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// IsNotFound reports whether err is a 404 of the API.
func IsNotFound(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == http.StatusNotFound
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

func (c *Client) request(ctx context.Context, method, path string, body any, hdr http.Header) (*http.Request, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if body != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a request and decodes a JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, body, out any, hdr http.Header) (*http.Response, error) {
	req, err := c.request(ctx, method, path, body, hdr)
	if err != nil {
		return nil, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return resp, readError(resp)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return resp, fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return resp, nil
}

func readError(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var er ErrorResponse
	if json.Unmarshal(data, &er) == nil && er.Error.Code != "" {
		e.ErrorBody = er.Error
	} else {
		e.Code, e.Message = "http_error", strings.TrimSpace(string(data))
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// CreateRun starts an async run (req.Mode is set to async). A non-empty
// idempotencyKey makes retries return the same run; replayed reports that.
func (c *Client) CreateRun(ctx context.Context, req CreateRunRequest, idempotencyKey string) (run *Run, replayed bool, err error) {
	req.Mode = "async"
	hdr := http.Header{}
	if idempotencyKey != "" {
		hdr.Set("Idempotency-Key", idempotencyKey)
	}
	run = &Run{}
	resp, err := c.do(ctx, "POST", "/v1/runs", req, run, hdr)
	if err != nil {
		return nil, false, err
	}
	return run, resp.Header.Get("Idempotent-Replayed") == "true", nil
}

// StreamRun starts an interactive run (req.Mode is set to stream) and
// follows its events until the run's log ends; fn sees each event once.
// A dropped connection is resumed with Last-Event-ID.
func (c *Client) StreamRun(ctx context.Context, req CreateRunRequest, idempotencyKey string, fn func(Event) error) (*StreamEnd, error) {
	req.Mode = "stream"
	hdr := http.Header{}
	if idempotencyKey != "" {
		hdr.Set("Idempotency-Key", idempotencyKey)
	}
	hreq, err := c.request(ctx, "POST", "/v1/runs?include=log", req, hdr)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", "text/event-stream")
	resp, err := c.http().Do(hreq)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	runID := resp.Header.Get("X-Run-Id")
	var last int64
	end, err := readStream(resp.Body, &last, fn)
	resp.Body.Close()
	if end != nil || ctx.Err() != nil || errors.Is(err, errCallback) {
		return end, unwrapCallback(err)
	}
	if runID == "" {
		return nil, fmt.Errorf("stream of a new run broke before it named the run: %w", err)
	}
	return c.Follow(ctx, runID, last, fn)
}

// StreamEnd is the final message of a stream.
type StreamEnd struct {
	RunID       string `json:"run_id"`
	Status      string `json:"status"`
	LastEventID int64  `json:"last_event_id"`
}

// Follow streams a run's events after seq `after` until the log ends,
// reconnecting with Last-Event-ID whenever a connection drops. fn sees each
// event exactly once, in order; an error from fn stops Follow.
func (c *Client) Follow(ctx context.Context, runID string, after int64, fn func(Event) error) (*StreamEnd, error) {
	wait := c.RetryWait
	if wait <= 0 {
		wait = 500 * time.Millisecond
	}
	failures := 0
	for {
		req, err := c.request(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"/events?include=log", nil, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
		resp, err := c.http().Do(req)
		if err == nil && resp.StatusCode == http.StatusNoContent {
			// The run had ended and we had every event (the end message
			// was lost with the connection).
			resp.Body.Close()
			run, err := c.GetRun(ctx, runID)
			if err != nil {
				return nil, err
			}
			return &StreamEnd{RunID: runID, Status: run.Status, LastEventID: after}, nil
		}
		if err == nil && resp.StatusCode != http.StatusOK {
			err = readError(resp)
			resp.Body.Close()
			var e *Error
			if errors.As(err, &e) && e.Status < 500 {
				return nil, err
			}
		} else if err == nil {
			before := after
			var end *StreamEnd
			end, err = readStream(resp.Body, &after, fn)
			resp.Body.Close()
			if end != nil || errors.Is(err, errCallback) {
				return end, unwrapCallback(err)
			}
			if after > before {
				failures = 0
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		failures++
		if failures > 20 {
			return nil, fmt.Errorf("stream of run %s: %w", runID, err)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

var errCallback = errors.New("callback")

type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Is(t error) bool {
	return t == errCallback
}

func unwrapCallback(err error) error {
	var ce *callbackError
	if errors.As(err, &ce) {
		return ce.err
	}
	return err
}

// readStream parses the public run stream, calling fn with the log event
// of each complete event message (the stream is asked for include=log) and
// advancing *last; it returns the end message, or the error that broke the
// stream (a partial message at a break is discarded). Messages without a
// log event (run.waiting, message.delta) are not log records and are
// skipped.
func readStream(body io.Reader, last *int64, fn func(Event) error) (*StreamEnd, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var id, event string
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "stream.end" {
				var end StreamEnd
				if err := json.Unmarshal([]byte(data.String()), &end); err != nil {
					return nil, err
				}
				return &end, nil
			}
			if id != "" && data.Len() > 0 {
				var sev StreamEvent
				if err := json.Unmarshal([]byte(data.String()), &sev); err != nil {
					return nil, fmt.Errorf("event %s: %w", id, err)
				}
				if ev := sev.Log; ev != nil && ev.Seq > *last {
					if err := fn(*ev); err != nil {
						return nil, &callbackError{err}
					}
					*last = ev.Seq
				}
			}
			id, event = "", ""
			data.Reset()
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id:"):
			id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, io.ErrUnexpectedEOF
}

// GetRun returns a run.
func (c *Client) GetRun(ctx context.Context, id string) (*Run, error) {
	var r Run
	_, err := c.do(ctx, "GET", "/v1/runs/"+url.PathEscape(id), nil, &r, nil)
	return &r, err
}

// ListRunsOptions filter ListRuns.
type ListRunsOptions struct {
	Agent, Status string
	// PromptHash selects the runs that sent a prompt with this sha256.
	PromptHash string
	Limit      int
}

// ListRuns lists the caller's tenant's runs, oldest first.
func (c *Client) ListRuns(ctx context.Context, o ListRunsOptions) ([]Run, error) {
	q := url.Values{}
	if o.Agent != "" {
		q.Set("agent", o.Agent)
	}
	if o.Status != "" {
		q.Set("status", o.Status)
	}
	if o.PromptHash != "" {
		q.Set("prompt_hash", o.PromptHash)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var out RunList
	_, err := c.do(ctx, "GET", "/v1/runs?"+q.Encode(), nil, &out, nil)
	return out.Runs, err
}

// Events returns up to limit events after seq after (limit 0: the server's
// default of 1000).
func (c *Client) Events(ctx context.Context, runID string, after int64, limit int) (*EventList, error) {
	q := url.Values{"after": {strconv.FormatInt(after, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return doJSON[EventList](ctx, c, "GET", "/v1/runs/"+url.PathEscape(runID)+"/events?"+q.Encode(), nil)
}

// AllEvents returns a run's whole log.
func (c *Client) AllEvents(ctx context.Context, runID string) ([]Event, error) {
	var all []Event
	var after int64
	for {
		page, err := c.Events(ctx, runID, after, 5000)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Events...)
		if len(page.Events) < 5000 {
			return all, nil
		}
		after = page.Events[len(page.Events)-1].Seq
	}
}

// Blob returns a blob that one of the run's events refers to.
func (c *Client) Blob(ctx context.Context, runID, sha256Hex string) ([]byte, error) {
	req, err := c.request(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"/blobs/"+url.PathEscape(sha256Hex), nil, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, readError(resp)
	}
	return io.ReadAll(resp.Body)
}

// SendMessage adds user text the run reads at its next step.
func (c *Client) SendMessage(ctx context.Context, runID, text string) (*SignalAccepted, error) {
	return doJSON[SignalAccepted](ctx, c, "POST", "/v1/runs/"+url.PathEscape(runID)+"/messages", MessageRequest{Text: text})
}

// Cancel asks the run to stop at its next step boundary.
func (c *Client) Cancel(ctx context.Context, runID, reason string) (*SignalAccepted, error) {
	return doJSON[SignalAccepted](ctx, c, "POST", "/v1/runs/"+url.PathEscape(runID)+":cancel", CancelRequest{Reason: reason})
}

// Replay re-runs an ended run from a step with a change.
func (c *Client) Replay(ctx context.Context, runID string, req ReplayRequest) (*Run, error) {
	return doJSON[Run](ctx, c, "POST", "/v1/runs/"+url.PathEscape(runID)+":replay", req)
}

// Approvals lists the tenant's pending approvals.
func (c *Client) Approvals(ctx context.Context) ([]Approval, error) {
	var out ApprovalList
	_, err := c.do(ctx, "GET", "/v1/approvals", nil, &out, nil)
	return out.Approvals, err
}

// GetApproval returns an approval and its status.
func (c *Client) GetApproval(ctx context.Context, id string) (*Approval, error) {
	return doJSON[Approval](ctx, c, "GET", "/v1/approvals/"+url.PathEscape(id), nil)
}

// Decide approves, rejects or edits an approval as the client's principal.
func (c *Client) Decide(ctx context.Context, id string, req DecideRequest) (*DecisionAccepted, error) {
	return doJSON[DecisionAccepted](ctx, c, "POST", "/v1/approvals/"+url.PathEscape(id)+":decide", req)
}

// ListAgents lists the agents the caller can see.
func (c *Client) ListAgents(ctx context.Context) ([]Agent, error) {
	var out AgentList
	_, err := c.do(ctx, "GET", "/v1/agents", nil, &out, nil)
	return out.Agents, err
}

// GetAgent describes an agent.
func (c *Client) GetAgent(ctx context.Context, name string) (*Agent, error) {
	return doJSON[Agent](ctx, c, "GET", "/v1/agents/"+url.PathEscape(name), nil)
}

// CreateAgentVersion stores a definition (YAML or JSON) as a new version.
func (c *Client) CreateAgentVersion(ctx context.Context, name string, definition []byte) (*AgentVersion, error) {
	var out AgentVersion
	hdr := http.Header{"Content-Type": {"application/yaml"}}
	_, err := c.do(ctx, "POST", "/v1/agents/"+url.PathEscape(name)+"/versions", definition, &out, hdr)
	return &out, err
}

// SetAlias points an alias at a version, optionally with a canary.
func (c *Client) SetAlias(ctx context.Context, name, alias string, req SetAliasRequest) (*Alias, error) {
	return doJSON[Alias](ctx, c, "PUT", "/v1/agents/"+url.PathEscape(name)+"/aliases/"+url.PathEscape(alias), req)
}

// RetireAgentVersion retires a version: it starts no new run by any
// reference; runs on it finish. The answer lists aliases still leading to it.
func (c *Client) RetireAgentVersion(ctx context.Context, name string, version int) (*AgentVersion, error) {
	return doJSON[AgentVersion](ctx, c, "POST", "/v1/agents/"+url.PathEscape(name)+"/versions/"+strconv.Itoa(version)+":retire", nil)
}

// PutTenantSettings replaces the tenant's settings (scope tenant:admin).
func (c *Client) PutTenantSettings(ctx context.Context, s TenantSettings) (*TenantSettings, error) {
	return doJSON[TenantSettings](ctx, c, "PUT", "/v1/tenant/settings", s)
}

// PutWebhook registers the tenant's webhook; the answer holds the secret.
func (c *Client) PutWebhook(ctx context.Context, req PutWebhookRequest) (*Webhook, error) {
	return doJSON[Webhook](ctx, c, "PUT", "/v1/webhook", req)
}

// Deliveries lists webhook deliveries (of one run, if runID is set).
func (c *Client) Deliveries(ctx context.Context, runID string) ([]Delivery, error) {
	q := url.Values{}
	if runID != "" {
		q.Set("run_id", runID)
	}
	var out DeliveryList
	_, err := c.do(ctx, "GET", "/v1/webhook/deliveries?"+q.Encode(), nil, &out, nil)
	return out.Deliveries, err
}

// Tenant returns the caller's identity, limits and usage.
func (c *Client) Tenant(ctx context.Context) (*Tenant, error) {
	return doJSON[Tenant](ctx, c, "GET", "/v1/tenant", nil)
}

// doJSON makes one API call whose answer is a T.
func doJSON[T any](ctx context.Context, c *Client, method, path string, body any) (*T, error) {
	var out T
	_, err := c.do(ctx, method, path, body, &out, nil)
	return &out, err
}

// Erase erases one run, or every run of one user, of the caller's tenant
// (scope tenant:admin): payload keys destroyed, event payloads replaced,
// the hash chain kept verifiable.
func (c *Client) Erase(ctx context.Context, req EraseRequest) (*EraseResult, error) {
	return doJSON[EraseResult](ctx, c, "POST", "/v1/erasures", req)
}
