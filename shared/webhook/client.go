package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

// By names this policy in a Resolution, for the audit trail.
const By = "webhook"

// maxReason bounds the reason kept from an answer (the audit trail is not
// a dumping ground); a longer one is cut at a rune boundary.
const maxReason = 1 << 10

// Client is the webhook stuck-resolution policy: it POSTs each STUCK
// transaction, signed, to one endpoint and returns the signed answer's
// action. It is safe for concurrent use.
//
// The endpoint is named by scheme and host only, in errors and when the
// Client is printed or logged: its path and query may carry a key. The secret
// is never printed.
type Client struct {
	endpoint string // the full URL; never printed
	name     string // redact.URL(endpoint)
	secret   []byte
	timeout  time.Duration
	http     *http.Client
}

var _ txm.StuckResolutionHook = (*Client)(nil)

// New builds a Client that asks endpoint (an http or https URL), signing with
// secret, and gives up after timeout (connecting, sending and reading the
// answer included). Redirects are not followed: a 3xx answer is a bad one.
func New(endpoint string, secret []byte, timeout time.Duration) (*Client, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		// url.Parse's error quotes the URL.
		return nil, errors.New("new webhook client: the URL does not parse")
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("new webhook client: the URL must be http(s)://host[/path]")
	}
	if len(secret) == 0 {
		return nil, errors.New("new webhook client: a secret is required")
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("new webhook client: timeout must be positive, got %s", timeout)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	return &Client{
		endpoint: endpoint,
		name:     redact.URL(endpoint),
		secret:   bytes.Clone(secret),
		timeout:  timeout,
		http: &http.Client{
			Transport: transport,
			Timeout:   timeout,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}, nil
}

// Resolve asks the webhook what to do with t. Any error means no decision:
// the endpoint could not be reached in time, or its answer was refused
// (ErrRefused) or unusable (ErrBadAnswer).
func (c *Client) Resolve(ctx context.Context, t txm.StuckTx) (txm.Resolution, error) {
	a, err := c.ask(ctx, t)
	if err != nil {
		return txm.Resolution{}, fmt.Errorf("ask webhook %s for tx %s: %w", c.name, t.TxID, err)
	}
	return txm.Resolution{Action: a.Action, Reason: a.Reason, By: By}, nil
}

func (c *Client) ask(ctx context.Context, t txm.StuckTx) (Answer, error) {
	id := rand.Text()
	body, err := json.Marshal(newRequest(id, t))
	if err != nil {
		return Answer{}, fmt.Errorf("encode request: %w", err)
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		// Its error may quote the URL; New has parsed it already.
		return Answer{}, errors.New("build request")
	}
	ts, sig := Sign(c.secret, body, time.Now())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "txfence-webhook/1")
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, sig)
	req.Header.Set(HeaderDelivery, id)

	resp, err := c.http.Do(req)
	if err != nil {
		return Answer{}, c.transportError(ctx, "send request", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return Answer{}, fmt.Errorf("%w: status %d", ErrBadAnswer, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return Answer{}, c.transportError(ctx, "read answer", err)
	}
	if len(b) > maxBody {
		return Answer{}, fmt.Errorf("%w: body over %d bytes", ErrBadAnswer, maxBody)
	}
	if err := Verify(c.secret, resp.Header.Get(HeaderTimestamp), resp.Header.Get(HeaderSignature), b, time.Now(), MaxAge); err != nil {
		return Answer{}, fmt.Errorf("answer: %w", err)
	}

	var a Answer
	if err := json.Unmarshal(b, &a); err != nil {
		return Answer{}, fmt.Errorf("%w: not a JSON answer: %v", ErrBadAnswer, err)
	}
	if err := bound(a, id, t.TxID); err != nil {
		return Answer{}, fmt.Errorf("answer: %w", err)
	}
	action, err := txm.ParseStuckAction(string(a.Action))
	if err != nil {
		return Answer{}, fmt.Errorf("%w: unknown action %.32q", ErrBadAnswer, a.Action)
	}
	return Answer{Action: action, Reason: clip(a.Reason, maxReason), DeliveryID: id, TxID: t.TxID}, nil
}

// bound refuses a signed answer that is not for this delivery of this
// transaction: the signature alone holds for five minutes, so an answer
// captured from another exchange would verify too.
func bound(a Answer, deliveryID, txID string) error {
	switch {
	case a.DeliveryID == "":
		return fmt.Errorf("%w: it names no deliveryId", ErrRefused)
	case a.DeliveryID != deliveryID:
		return fmt.Errorf("%w: it answers another delivery", ErrRefused)
	case a.TxID == "":
		return fmt.Errorf("%w: it names no txId", ErrRefused)
	case a.TxID != txID:
		return fmt.Errorf("%w: it answers for another transaction", ErrRefused)
	}
	return nil
}

// transportError says why no answer came, without the URL that net/http
// puts in its errors.
func (c *Client) transportError(ctx context.Context, op string, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("%s: no answer within %s: %w", op, c.timeout, ctx.Err())
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %w", op, ctx.Err())
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return fmt.Errorf("%s: %w", op, err)
}

// String names the client by the endpoint's scheme and host.
func (c *Client) String() string { return "webhook " + c.name }

// LogValue logs the client as String does.
func (c *Client) LogValue() slog.Value { return slog.StringValue(c.String()) }

// clip cuts s to at most n bytes, at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
