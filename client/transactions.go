package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// State is a transaction's state.
type State string

// The states of a transaction.
const (
	StatePendingApproval State = "PENDING_APPROVAL"
	StateAllocated       State = "ALLOCATED"
	StateTracking        State = "TRACKING"
	StateMined           State = "MINED"
	StateConfirmed       State = "CONFIRMED"
	StateFailedFinal     State = "FAILED_FINAL"
	StateStuck           State = "STUCK"
)

// Final says whether s ends a transaction (a CONFIRMED one may still be
// reopened by a deep reorg, and is reported again).
func (s State) Final() bool { return s == StateConfirmed || s == StateFailedFinal }

// CreateRequest is a transaction to create. Quantities are decimal wei.
type CreateRequest struct {
	// ChainID may be zero when the deployment has one chain.
	ChainID uint64
	From    string
	// To is empty for a contract creation.
	To    string
	Value *big.Int
	Data  []byte
	// GasLimit zero has the gas estimated.
	GasLimit             uint64
	MaxFeePerGas         *big.Int
	MaxPriorityFeePerGas *big.Int
	GasPrice             *big.Int
	// RequestID makes the create idempotent; Create makes one when empty.
	RequestID string
	Metadata  json.RawMessage
	SendVia   string
	// ErrorABI decodes a revert's custom error (an ABI JSON or a
	// signature).
	ErrorABI string
}

// createBody is a create on the wire.
type createBody struct {
	ChainID              uint64          `json:"chainId,omitempty"`
	From                 string          `json:"from"`
	To                   string          `json:"to,omitempty"`
	Value                string          `json:"value,omitempty"`
	Data                 string          `json:"data,omitempty"`
	GasLimit             uint64          `json:"gasLimit,omitempty"`
	MaxFeePerGas         string          `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas string          `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             string          `json:"gasPrice,omitempty"`
	RequestID            string          `json:"requestId"`
	Metadata             json.RawMessage `json:"metadata,omitempty"`
	SendVia              string          `json:"sendVia,omitempty"`
	ErrorABI             string          `json:"errorAbi,omitempty"`
}

func decimal(v *big.Int) string {
	if v == nil {
		return ""
	}
	return v.String()
}

// Transaction is a transaction as the API shows it. Quantities are decimal
// strings, as on the wire.
type Transaction struct {
	ID                   string          `json:"id"`
	ChainID              uint64          `json:"chainId"`
	From                 string          `json:"from"`
	To                   *string         `json:"to"`
	Nonce                *uint64         `json:"nonce,omitempty"`
	State                State           `json:"state"`
	SubState             string          `json:"subState,omitempty"`
	RequestID            *string         `json:"requestId"`
	Hash                 *string         `json:"hash"`
	Value                string          `json:"value"`
	Data                 string          `json:"data"`
	GasLimit             *uint64         `json:"gasLimit"`
	MaxFeePerGas         *string         `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *string         `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             *string         `json:"gasPrice,omitempty"`
	Metadata             json.RawMessage `json:"metadata,omitempty"`
	SendVia              string          `json:"sendVia,omitempty"`
	ReorgCount           int             `json:"reorgCount"`
	Attempts             int             `json:"attempts"`
	Receipt              *Receipt        `json:"receipt,omitempty"`
	LastError            string          `json:"lastError,omitempty"`
	Cost                 *Cost           `json:"cost,omitempty"`
	Effects              json.RawMessage `json:"effects,omitempty"`
	Simulation           string          `json:"simulation,omitempty"`
	SimulationRevert     string          `json:"simulationRevert,omitempty"`
	Approval             json.RawMessage `json:"approval,omitempty"`
	CreatedAt            time.Time       `json:"createdAt"`
	UpdatedAt            time.Time       `json:"updatedAt"`
}

// Receipt is a mined transaction's receipt.
type Receipt struct {
	BlockNumber       uint64  `json:"blockNumber"`
	BlockHash         string  `json:"blockHash"`
	Status            uint64  `json:"status"`
	GasUsed           uint64  `json:"gasUsed"`
	EffectiveGasPrice *string `json:"effectiveGasPrice,omitempty"`
}

// Cost is a transaction's worst-case cost and its parts.
type Cost struct {
	WorstCase    string  `json:"worstCase"`
	ExecutionFee *string `json:"executionFee,omitempty"`
	DataFee      string  `json:"dataFee"`
}

// Created is a create's answer.
type Created struct {
	Transaction
	// Replayed says the request id already named this transaction (200):
	// an earlier attempt, this client's or another's, created it.
	Replayed bool
}

// NewRequestID is a fresh random request id (a UUID v4).
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Create creates r exactly once: it gives r a request id when it has none
// and retries every answer that may be retried (no answer, 429 after its
// Retry-After, 5xx, 503 outcome-unknown) with that same id, so that the
// transaction is created once however many attempts it takes. A replay's
// answer (200) is a success. A 4xx other than 429 is returned at once, an
// *Error.
func (c *Client) Create(ctx context.Context, r CreateRequest) (Created, error) {
	if r.RequestID == "" {
		r.RequestID = NewRequestID()
	}
	body := createBody{ChainID: r.ChainID, From: r.From, To: r.To, Value: decimal(r.Value), GasLimit: r.GasLimit,
		MaxFeePerGas: decimal(r.MaxFeePerGas), MaxPriorityFeePerGas: decimal(r.MaxPriorityFeePerGas), GasPrice: decimal(r.GasPrice),
		RequestID: r.RequestID, Metadata: r.Metadata, SendVia: r.SendVia, ErrorABI: r.ErrorABI}
	if r.Data != nil {
		body.Data = "0x" + hex.EncodeToString(r.Data)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return Created{}, fmt.Errorf("txfence: encode create: %w", err)
	}
	var out Created
	status, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/transactions", body: b, requestID: r.RequestID}, &out.Transaction)
	if err != nil {
		return Created{}, fmt.Errorf("create %s: %w", r.RequestID, err)
	}
	out.Replayed = status == http.StatusOK
	return out, nil
}

// Get reads one transaction.
func (c *Client) Get(ctx context.Context, id string) (Transaction, error) {
	var t Transaction
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/transactions/" + url.PathEscape(id)}, &t); err != nil {
		return Transaction{}, fmt.Errorf("get %s: %w", id, err)
	}
	return t, nil
}

// GetByRequestID finds the transaction a create's request id names, on
// signer from (and chainID, zero when the deployment has one chain).
func (c *Client) GetByRequestID(ctx context.Context, chainID uint64, from, requestID string) (Transaction, error) {
	q := url.Values{"from": {from}, "requestId": {requestID}}
	if chainID != 0 {
		q.Set("chainId", strconv.FormatUint(chainID, 10))
	}
	var t Transaction
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/transactions?" + q.Encode()}, &t); err != nil {
		return Transaction{}, fmt.Errorf("get by request id %s: %w", requestID, err)
	}
	return t, nil
}

// ListOptions filter a list; zero fields do not.
type ListOptions struct {
	Signer        string
	ChainID       uint64
	State         State
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Limit is the page's size (1..500; zero: the server's 50).
	Limit int
	// Cursor is a previous page's NextCursor.
	Cursor string
}

// Page is a page of transactions, newest first.
type Page struct {
	Items []Transaction `json:"items"`
	// NextCursor is the cursor of the next page, empty on the last.
	NextCursor string `json:"nextCursor,omitempty"`
}

// List reads a page of transactions.
func (c *Client) List(ctx context.Context, o ListOptions) (Page, error) {
	q := url.Values{}
	if o.Signer != "" {
		q.Set("signer", o.Signer)
	}
	if o.ChainID != 0 {
		q.Set("chainId", strconv.FormatUint(o.ChainID, 10))
	}
	if o.State != "" {
		q.Set("state", string(o.State))
	}
	if !o.CreatedAfter.IsZero() {
		q.Set("createdAfter", o.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !o.CreatedBefore.IsZero() {
		q.Set("createdBefore", o.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	path := "/v1/transactions"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p Page
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &p); err != nil {
		return Page{}, fmt.Errorf("list transactions: %w", err)
	}
	if p.Items == nil {
		p.Items = []Transaction{}
	}
	return p, nil
}
