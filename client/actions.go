package client

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/url"
	"time"
)

// ActionRequest is an admin action on a transaction: resubmit, replace or
// cancel. The function that holds the signer's key carries it out shortly
// after the API records it.
type ActionRequest struct {
	// ActionID makes the action idempotent; the client makes one when
	// empty and retries with it.
	ActionID string
	// Reason is kept in the audit trail.
	Reason string
	// Fees are a replace's own fees; without them it bumps within the
	// chain's caps.
	MaxFeePerGas         *big.Int
	MaxPriorityFeePerGas *big.Int
	GasPrice             *big.Int
}

// Action is an admin action as the API records it.
type Action struct {
	TxID                 string     `json:"txId"`
	ActionID             string     `json:"actionId"`
	Action               string     `json:"action"`
	Status               string     `json:"status"`
	Result               string     `json:"result,omitempty"`
	Reason               string     `json:"reason"`
	Actor                string     `json:"actor"`
	MaxFeePerGas         *string    `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *string    `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             *string    `json:"gasPrice,omitempty"`
	Token                int64      `json:"token,omitempty"`
	CreatedAt            time.Time  `json:"createdAt"`
	DoneAt               *time.Time `json:"doneAt,omitempty"`
}

// Resubmit asks for transaction id to be broadcast again now.
func (c *Client) Resubmit(ctx context.Context, id string, r ActionRequest) (Action, error) {
	return c.act(ctx, id, "resubmit", r)
}

// Replace asks for transaction id to be replaced with higher fees.
func (c *Client) Replace(ctx context.Context, id string, r ActionRequest) (Action, error) {
	return c.act(ctx, id, "replace", r)
}

// Cancel asks for transaction id's nonce to be taken by a 0-value
// self-transfer.
func (c *Client) Cancel(ctx context.Context, id string, r ActionRequest) (Action, error) {
	return c.act(ctx, id, "cancel", r)
}

func (c *Client) act(ctx context.Context, id, kind string, r ActionRequest) (Action, error) {
	if r.ActionID == "" {
		r.ActionID = NewRequestID()
	}
	b, err := json.Marshal(struct {
		ActionID             string `json:"actionId"`
		Reason               string `json:"reason"`
		MaxFeePerGas         string `json:"maxFeePerGas,omitempty"`
		MaxPriorityFeePerGas string `json:"maxPriorityFeePerGas,omitempty"`
		GasPrice             string `json:"gasPrice,omitempty"`
	}{r.ActionID, r.Reason, decimal(r.MaxFeePerGas), decimal(r.MaxPriorityFeePerGas), decimal(r.GasPrice)})
	if err != nil {
		return Action{}, fmt.Errorf("txfence: encode %s: %w", kind, err)
	}
	var a Action
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/v1/transactions/" + url.PathEscape(id) + "/" + kind, body: b,
		requestID: r.ActionID}, &a); err != nil {
		return Action{}, fmt.Errorf("%s %s: %w", kind, id, err)
	}
	return a, nil
}

// Actions lists the admin actions on transaction id.
func (c *Client) Actions(ctx context.Context, id string) ([]Action, error) {
	var out struct {
		Items []Action `json:"items"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/v1/transactions/" + url.PathEscape(id) + "/actions"}, &out); err != nil {
		return nil, fmt.Errorf("actions of %s: %w", id, err)
	}
	return out.Items, nil
}
