package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// The routes the operator console reads: who the caller is, every signer's
// lanes a page at a time, and (in get) a transaction's attempts and history.

// meView is the caller as the API sees it: enough for a page to know which
// buttons to offer (the server decides anyway).
type meView struct {
	Principal  string     `json:"principal"`
	Roles      []txm.Role `json:"roles"`
	Admin      bool       `json:"admin"`
	AllSigners bool       `json:"allSigners"`
	Signers    []string   `json:"signers"`
}

// me serves GET /v1/me: the caller's own principal and policy summary.
func (h *Handler) me(w http.ResponseWriter, r *http.Request) {
	c := callerOf(r)
	v := meView{Principal: c.who.ID, Roles: c.pol.Roles, Admin: c.pol.Has(txm.RoleAdmin), AllSigners: c.pol.AllSigners, Signers: []string{}}
	if v.Roles == nil {
		v.Roles = []txm.Role{}
	}
	for _, s := range c.pol.Signers {
		v.Signers = append(v.Signers, txm.CanonicalAddress(s))
	}
	writeJSON(w, http.StatusOK, v)
}

// laneView is one open transaction of a signer's lane.
type laneView struct {
	ID       string    `json:"id"`
	Nonce    uint64    `json:"nonce"`
	State    txm.State `json:"state"`
	SubState string    `json:"subState,omitempty"`
}

// laneCounts are a signer's open transactions by state.
type laneCounts struct {
	Allocated int `json:"allocated"`
	Tracking  int `json:"tracking"`
	Mined     int `json:"mined"`
	Stuck     int `json:"stuck"`
}

// signerRowView is one row of the signers list.
type signerRowView struct {
	ChainID                 uint64           `json:"chainId"`
	ChainKind               config.ChainKind `json:"chainKind"`
	Address                 string           `json:"address"`
	Configured              bool             `json:"configured"`
	NextNonce               *uint64          `json:"nextNonce"`
	FinalBelow              uint64           `json:"finalBelow"`
	Counts                  laneCounts       `json:"counts"`
	Lane                    []laneView       `json:"lane"`
	OldestPendingAgeSeconds *float64         `json:"oldestPendingAgeSeconds"`
	InFlightNeed            string           `json:"inFlightNeed"`
	Balance                 *string          `json:"balance"`
	LeaseHolder             *leaseView       `json:"leaseHolder"`
	LastError               string           `json:"lastError,omitempty"`
	LastErrorAt             *time.Time       `json:"lastErrorAt,omitempty"`
}

type signerPageView struct {
	Items      []signerRowView `json:"items"`
	Total      int             `json:"total"`
	NextCursor string          `json:"nextCursor,omitempty"`
}

// balanceTimeout bounds the chain read of one page's balances; past it the
// page is answered without them.
const balanceTimeout = 2 * time.Second

// signers serves GET /v1/signers: every signer the caller may read (the
// configured ones and any the database knows), ordered by chain and
// address, a page at a time, each with its lanes, lease and last error,
// and its balance when the chain answers in time.
func (h *Handler) signers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var errs []fieldError
	bad := func(f, m string) { errs = append(errs, fieldError{Field: f, Message: m}) }
	for k := range q {
		if k != "chainId" && k != "prefix" && k != "limit" && k != "cursor" {
			bad(k, "unknown query parameter")
		}
	}
	f := txm.SignerListFilter{Limit: 50}
	if s := q.Get("chainId"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			bad("chainId", "must be a positive integer")
		}
		f.ChainID = n
	}
	if s := strings.ToLower(strings.TrimSpace(q.Get("prefix"))); s != "" {
		hexPart := strings.TrimPrefix(s, "0x")
		if len(hexPart) > 40 || strings.Trim(hexPart, "0123456789abcdef") != "" {
			bad("prefix", "must be hex digits of an address (0x optional)")
		}
		f.Prefix = "0x" + hexPart
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			bad("limit", "must be between 1 and 500")
		}
		f.Limit = n
	}
	if s := q.Get("cursor"); s != "" {
		k, ok := decodeSignerCursor(s)
		if !ok {
			bad("cursor", "is not a cursor this API returned")
		}
		f.After = &k
	}
	if len(errs) > 0 {
		writeProblem(w, badRequest("invalid query parameters", errs...))
		return
	}
	for _, c := range h.deps.Config.Chains {
		f.Chains = append(f.Chains, c.ID)
	}
	configured := map[common.Address]bool{}
	for _, s := range h.deps.Config.Signers {
		f.Configured = append(f.Configured, s.Address)
		configured[s.Address] = true
	}
	if pol := callerOf(r).pol; !pol.AllSigners {
		f.Only = append([]common.Address{}, pol.Signers...) // only the caller's signers; none is an empty page
	}
	page, err := h.deps.Operator.ListSigners(r.Context(), f)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	out := signerPageView{Items: make([]signerRowView, len(page.Items)), Total: page.Total}
	for i, s := range page.Items {
		out.Items[i] = viewSignerRow(s, configured[s.Signer])
		out.Items[i].ChainKind = h.deps.Config.Profile(s.ChainID).Kind
	}
	h.addBalances(r.Context(), page.Items, out.Items)
	if len(page.Items) == f.Limit {
		last := page.Items[len(page.Items)-1]
		out.NextCursor = encodeSignerCursor(last.SignerKey)
	}
	writeJSON(w, http.StatusOK, out)
}

func viewSignerRow(s txm.SignerLanes, configured bool) signerRowView {
	v := signerRowView{ChainID: s.ChainID, Address: txm.CanonicalAddress(s.Signer), Configured: configured, NextNonce: s.NextNonce,
		FinalBelow: s.FinalBelow, Counts: laneCounts{Allocated: s.Allocated, Tracking: s.Tracking, Mined: s.Mined, Stuck: s.Stuck},
		Lane: make([]laneView, len(s.Lane)), InFlightNeed: "0", LastError: s.LastError, LastErrorAt: s.LastErrorAt}
	for i, l := range s.Lane {
		v.Lane[i] = laneView{ID: l.ID, Nonce: l.Nonce, State: l.State, SubState: l.SubState}
	}
	if s.OldestPendingAge != nil {
		secs := s.OldestPendingAge.Seconds()
		v.OldestPendingAgeSeconds = &secs
	}
	if s.InFlightNeed != nil {
		v.InFlightNeed = s.InFlightNeed.String()
	}
	if l := s.ChainLease; l != nil {
		lv := &leaseView{Owner: l.Owner, Token: l.Token, Live: s.ChainLeaseLive}
		if !l.ExpiresAt.IsZero() {
			lv.ExpiresAt = &l.ExpiresAt
		}
		v.LeaseHolder = lv
	}
	return v
}

// addBalances reads the page's balances, one batched call per chain; a
// chain that fails or is slow leaves its rows' balance null.
func (h *Handler) addBalances(ctx context.Context, items []txm.SignerLanes, out []signerRowView) {
	byChain := map[uint64][]int{}
	for i, s := range items {
		byChain[s.ChainID] = append(byChain[s.ChainID], i)
	}
	ctx, cancel := context.WithTimeout(ctx, balanceTimeout)
	defer cancel()
	for chainID, idx := range byChain {
		view := h.deps.Views[chainID]
		if view == nil {
			continue
		}
		addrs := make([]common.Address, len(idx))
		for j, i := range idx {
			addrs[j] = items[i].Signer
		}
		bals, err := view.Balances(ctx, addrs)
		if err != nil {
			continue // the column says unknown; the rest of the page stands
		}
		for j, i := range idx {
			if bals[j] != nil {
				out[i].Balance = bigString(bals[j])
			}
		}
	}
}

// A signer cursor is the last row's chain and address.
func encodeSignerCursor(k txm.SignerKey) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(k.ChainID, 10) + ":" + txm.CanonicalAddress(k.Signer)))
}

func decodeSignerCursor(s string) (txm.SignerKey, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return txm.SignerKey{}, false
	}
	c, a, ok := strings.Cut(string(b), ":")
	if !ok {
		return txm.SignerKey{}, false
	}
	id, err := strconv.ParseUint(c, 10, 64)
	if err != nil {
		return txm.SignerKey{}, false
	}
	addr, err := txm.ParseAddress(a)
	if err != nil {
		return txm.SignerKey{}, false
	}
	return txm.SignerKey{ChainID: id, Signer: addr}, true
}

// attemptView is one signed attempt on the wire (never its raw bytes).
type attemptView struct {
	No                   int        `json:"no"`
	Kind                 string     `json:"kind"`
	Hash                 string     `json:"hash"`
	Nonce                uint64     `json:"nonce"`
	GasLimit             uint64     `json:"gasLimit"`
	MaxFeePerGas         *string    `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *string    `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             *string    `json:"gasPrice,omitempty"`
	CreatedAt            time.Time  `json:"createdAt"`
	BroadcastAt          *time.Time `json:"broadcastAt"`
	BroadcastCount       int        `json:"broadcastCount"`
	Outcome              string     `json:"outcome,omitempty"`
	LastError            string     `json:"lastError,omitempty"`
	Token                int64      `json:"token"`
}

// historyView is one state change on the wire.
type historyView struct {
	From      txm.State `json:"from,omitempty"`
	To        txm.State `json:"to"`
	SubState  string    `json:"subState,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	Owner     string    `json:"owner"`
	Token     int64     `json:"token"`
	Action    string    `json:"action,omitempty"`
	Actor     string    `json:"actor,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
}

// txDetailView is a transaction with what ?include= asked for.
type txDetailView struct {
	txView
	AttemptList           []attemptView `json:"attemptList,omitempty"`
	History               []historyView `json:"history,omitempty"`
	Confirmations         *uint64       `json:"confirmations,omitempty"`
	ConfirmationsRequired *uint64       `json:"confirmationsRequired,omitempty"`
}

// includes reads get's include parameter: a comma-separated subset of
// attempts and history (other parameters are ignored, as they always were).
func includes(r *http.Request) (attempts, history bool, p *problem) {
	for _, v := range r.URL.Query()["include"] {
		for _, part := range strings.Split(v, ",") {
			switch strings.TrimSpace(part) {
			case "attempts":
				attempts = true
			case "history":
				history = true
			case "":
			default:
				bp := badRequest("invalid query parameters", fieldError{Field: "include", Message: "must list attempts and/or history"})
				return false, false, &bp
			}
		}
	}
	return attempts, history, nil
}

// detail adds to a transaction its attempts, history and confirmations.
func (h *Handler) detail(ctx context.Context, t *txm.Tx, attempts, history bool) (txDetailView, error) {
	v := txDetailView{txView: viewTx(t)}
	if attempts {
		as, err := h.deps.Operator.TxAttempts(ctx, t.ID)
		if err != nil {
			return v, err
		}
		v.AttemptList = make([]attemptView, len(as))
		for i, a := range as {
			v.AttemptList[i] = attemptView{No: a.No, Kind: string(a.Kind), Hash: a.Hash.Hex(), Nonce: a.Nonce, GasLimit: a.GasLimit,
				MaxFeePerGas: bigString(a.MaxFeePerGas), MaxPriorityFeePerGas: bigString(a.MaxPriorityFeePerGas), GasPrice: bigString(a.GasPrice),
				CreatedAt: a.CreatedAt.UTC(), BroadcastAt: a.BroadcastAt, BroadcastCount: a.BroadcastCount, Outcome: a.Outcome,
				LastError: a.LastError, Token: a.Token}
		}
	}
	if history {
		hs, err := h.deps.Operator.TxHistory(ctx, t.ID)
		if err != nil {
			return v, err
		}
		v.History = make([]historyView, len(hs))
		for i, e := range hs {
			v.History[i] = historyView{From: e.From, To: e.To, SubState: e.SubState, Reason: e.Reason, Owner: e.Owner, Token: e.Token,
				Action: e.Action, Actor: e.Actor, CreatedAt: e.CreatedAt.UTC()}
		}
	}
	if t.Receipt != nil && (attempts || history) {
		if view := h.deps.Views[t.ChainID]; view != nil {
			hctx, cancel := context.WithTimeout(ctx, balanceTimeout)
			head, err := view.Head(hctx)
			cancel()
			if err == nil && head.Number >= t.Receipt.BlockNumber {
				n := head.Number - t.Receipt.BlockNumber + 1
				v.Confirmations = &n
			}
		}
		if h.deps.Config.FinalityMode == config.FinalityConfirmations {
			n := h.deps.Config.Confirmations
			v.ConfirmationsRequired = &n
		}
	}
	return v, nil
}
