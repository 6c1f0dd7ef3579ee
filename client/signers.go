package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// SignerOptions filter the signers list; zero fields do not.
type SignerOptions struct {
	ChainID uint64
	// Prefix keeps addresses starting with these hex digits (0x optional).
	Prefix string
	// Limit is a page's size (1..500; zero: the server's 50).
	Limit int
	// Cursor is a previous page's NextCursor (SignersPage only).
	Cursor string
}

// Signer is one signer on one chain as the API lists it: its nonce lane
// and who holds its lease. Quantities are decimal wei strings, as on the
// wire.
type Signer struct {
	ChainID uint64 `json:"chainId"`
	// ChainKind is the chain's profile: generic, l1, op-stack or arbitrum.
	ChainKind string `json:"chainKind"`
	Address   string `json:"address"`
	// Configured is false for a signer the database knows but this
	// deployment does not configure.
	Configured bool    `json:"configured"`
	NextNonce  *uint64 `json:"nextNonce"`
	// FinalBelow: every nonce below it is final (or was never txfence's).
	FinalBelow uint64       `json:"finalBelow"`
	Counts     SignerCounts `json:"counts"`
	// Lane is the first open transactions in nonce order (at most 24):
	// Lane[0] is the one the others wait on.
	Lane                    []LaneTx `json:"lane"`
	OldestPendingAgeSeconds *float64 `json:"oldestPendingAgeSeconds"`
	// InFlightNeed is what the open unmined transactions may spend.
	InFlightNeed string `json:"inFlightNeed"`
	// Balance is nil when the chain did not answer in time.
	Balance     *string    `json:"balance"`
	LeaseHolder *Lease     `json:"leaseHolder"`
	LastError   string     `json:"lastError,omitempty"`
	LastErrorAt *time.Time `json:"lastErrorAt,omitempty"`
}

// SignerCounts are a signer's open transactions by state.
type SignerCounts struct {
	Allocated int `json:"allocated"`
	Tracking  int `json:"tracking"`
	Mined     int `json:"mined"`
	Stuck     int `json:"stuck"`
}

// LaneTx is one open transaction of a signer's lane.
type LaneTx struct {
	ID       string `json:"id"`
	Nonce    uint64 `json:"nonce"`
	State    State  `json:"state"`
	SubState string `json:"subState,omitempty"`
}

// Lease is who holds a signer's chain lease, with its fencing token.
type Lease struct {
	Owner     string     `json:"owner"`
	Token     int64      `json:"token"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Live      bool       `json:"live"`
}

// SignerPage is a page of signers, ordered by chain and address.
type SignerPage struct {
	Items []Signer `json:"items"`
	// Total counts the signers the filter keeps, on every page.
	Total int `json:"total"`
	// NextCursor is the cursor of the next page, empty on the last (a
	// full page may be followed by an empty one).
	NextCursor string `json:"nextCursor,omitempty"`
}

// SignersPage reads one page of the signers the caller may read (the
// reader role: a sender alone is ErrForbidden).
func (c *Client) SignersPage(ctx context.Context, o SignerOptions) (SignerPage, error) {
	q := url.Values{}
	if o.ChainID != 0 {
		q.Set("chainId", strconv.FormatUint(o.ChainID, 10))
	}
	if o.Prefix != "" {
		q.Set("prefix", o.Prefix)
	}
	if o.Limit != 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	path := "/v1/signers"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p SignerPage
	if _, err := c.do(ctx, call{method: http.MethodGet, path: path}, &p); err != nil {
		return SignerPage{}, fmt.Errorf("list signers: %w", err)
	}
	if p.Items == nil {
		p.Items = []Signer{}
	}
	return p, nil
}

// Signers reads every signer the caller may read, following the pages
// from the first (o.Cursor is ignored), in the API's order: by chain,
// then address.
func (c *Client) Signers(ctx context.Context, o SignerOptions) ([]Signer, error) {
	o.Cursor = ""
	out := []Signer{}
	for {
		p, err := c.SignersPage(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Items...)
		if p.NextCursor == "" || len(p.Items) == 0 {
			return out, nil
		}
		o.Cursor = p.NextCursor
	}
}
