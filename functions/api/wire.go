package api

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// createFields are the members a create body may have.
var createFields = map[string]bool{
	"chainId": true, "from": true, "to": true, "value": true, "data": true, "gasLimit": true,
	"maxFeePerGas": true, "maxPriorityFeePerGas": true, "gasPrice": true, "requestId": true, "metadata": true,
	"errorAbi": true, "sendVia": true,
}

// maxErrorABI bounds a create's errorAbi, in bytes.
const maxErrorABI = 64 * 1024

// maxUint256 is the largest value a quantity may have.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// decodeCreate turns a create body into a request. Syntax errors and unknown
// members are malformed (400); bad or missing values, and an EIP-7702
// authorization list, are invalid (422).
func decodeCreate(body []byte, idemKey string, cfg config.Config) (*txm.Request, *problem) {
	var raw map[string]json.RawMessage
	if json.Unmarshal(body, &raw) != nil {
		// Said as the stream decoder says it: what is wrong, or that more
		// than one value came.
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&raw); err != nil {
			p := badRequest("the body must be a JSON object: " + err.Error())
			return nil, &p
		}
		p := badRequest("the body must hold exactly one JSON object")
		return nil, &p
	}
	if _, ok := raw["authorizationList"]; ok {
		// Said plainly rather than as an unknown field: a caller sending
		// one means a type-4 (set-code) transaction, which txfence does
		// not build.
		p := probInvalid.problem("EIP-7702 authorizations are not supported: txfence does not send set-code (type 4) transactions; nothing was written")
		p.Errors = []fieldError{{Field: "authorizationList", Message: "EIP-7702 authorization lists are not supported"}}
		return nil, &p
	}
	var unknown []fieldError
	for k := range raw {
		if !createFields[k] {
			unknown = append(unknown, fieldError{Field: k, Message: "unknown field"})
		}
	}
	if len(unknown) > 0 {
		sort.Slice(unknown, func(i, j int) bool { return unknown[i].Field < unknown[j].Field })
		p := badRequest("the body has unknown fields", unknown...)
		return nil, &p
	}

	var errs []fieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, fieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	r := &txm.Request{Value: new(big.Int)}

	if v, ok := present(raw, "chainId"); ok {
		n, err := uintField(v, 64)
		if err != nil {
			bad("chainId", "%v", err)
		} else {
			r.ChainID = n
		}
	} else if len(cfg.Chains) == 1 {
		r.ChainID = cfg.Chains[0].ID
	} else {
		bad("chainId", "is required when more than one chain is configured")
	}

	if v, ok := present(raw, "from"); !ok {
		bad("from", "is required")
	} else if a, err := addressField(v); err != nil {
		bad("from", "%v", err)
	} else {
		r.From = a
	}
	if v, ok := present(raw, "to"); ok {
		if a, err := addressField(v); err != nil {
			bad("to", "%v", err)
		} else {
			r.To = &a
		}
	}
	if v, ok := present(raw, "value"); ok {
		if q, err := quantityField(v); err != nil {
			bad("value", "%v", err)
		} else {
			r.Value = q
		}
	}
	if v, ok := present(raw, "data"); ok {
		if d, err := dataField(v, cfg.MaxDataBytes); err != nil {
			bad("data", "%v", err)
		} else {
			r.Data = d
		}
	}
	if v, ok := present(raw, "gasLimit"); ok {
		if n, err := uintField(v, 64); err != nil {
			bad("gasLimit", "%v", err)
		} else if n == 0 {
			bad("gasLimit", "must be positive (omit it to have gas estimated)")
		} else {
			r.GasLimit = n
		}
	}
	for _, f := range []struct {
		name string
		dst  **big.Int
	}{{"maxFeePerGas", &r.MaxFeePerGas}, {"maxPriorityFeePerGas", &r.MaxPriorityFeePerGas}, {"gasPrice", &r.GasPrice}} {
		if v, ok := present(raw, f.name); ok {
			if q, err := quantityField(v); err != nil {
				bad(f.name, "%v", err)
			} else {
				*f.dst = q
			}
		}
	}
	bodyID := ""
	if v, ok := present(raw, "requestId"); ok {
		if s, err := jsonString(v); err != nil || strings.TrimSpace(s) == "" {
			bad("requestId", "must be a non-empty string")
		} else {
			bodyID = s
		}
	}
	switch {
	case bodyID != "" && idemKey != "" && bodyID != idemKey:
		bad("requestId", "differs from the Idempotency-Key header (%q); give one or make them equal", idemKey)
	case bodyID != "":
		r.RequestID = bodyID
	default:
		r.RequestID = idemKey
	}
	if v, ok := present(raw, "metadata"); ok {
		if len(v) == 0 || v[0] != '{' {
			bad("metadata", "must be a JSON object")
		} else {
			r.Metadata = json.RawMessage(v)
		}
	}
	if v, ok := present(raw, "sendVia"); ok {
		// Which names the chain has is the use case's check.
		if s, err := jsonString(v); err != nil || strings.TrimSpace(s) == "" {
			bad("sendVia", "must be the name of one of the chain's send-only endpoints, or %q", config.RoutePublic)
		} else {
			r.SendVia = s
		}
	}
	if v, ok := present(raw, "errorAbi"); ok {
		// A signature or ABI JSON in a string, or the ABI JSON itself.
		switch {
		case len(v) > maxErrorABI:
			bad("errorAbi", "must be at most %d bytes", maxErrorABI)
		case v[0] == '{' || v[0] == '[':
			r.ErrorABI = string(v)
		default:
			if s, err := jsonString(v); err != nil || strings.TrimSpace(s) == "" {
				bad("errorAbi", "must be a JSON ABI (an error item or an array) or a non-empty string")
			} else {
				r.ErrorABI = s
			}
		}
	}
	if len(errs) > 0 {
		p := invalid(errs)
		return nil, &p
	}
	return r, nil
}

// present returns a member that is there and not null.
func present(raw map[string]json.RawMessage, k string) (json.RawMessage, bool) {
	v, ok := raw[k]
	if !ok || string(v) == "null" {
		return nil, false
	}
	return v, true
}

func addressField(v json.RawMessage) (common.Address, error) {
	s, err := jsonString(v)
	if err != nil {
		return common.Address{}, fmt.Errorf("must be a string")
	}
	return txm.ParseAddress(s)
}

// jsonString reads a JSON string: at once when it is printable ASCII
// without escapes (what every address, quantity and most request ids
// are), else through encoding/json.
func jsonString(v json.RawMessage) (string, error) {
	if n := len(v); n >= 2 && v[0] == '"' && v[n-1] == '"' {
		plain := true
		for _, c := range v[1 : n-1] {
			if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
				plain = false
				break
			}
		}
		if plain {
			return string(v[1 : n-1]), nil
		}
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

// quantityField reads a string holding a decimal or 0x-hex unsigned integer
// of at most 256 bits.
func quantityField(v json.RawMessage) (*big.Int, error) {
	s, err := jsonString(v)
	if err != nil {
		return nil, fmt.Errorf("must be a string holding a decimal or 0x-hex integer")
	}
	return parseQuantity(s)
}

func parseQuantity(s string) (*big.Int, error) {
	var n *big.Int
	var ok bool
	switch {
	case s == "":
		return nil, fmt.Errorf("must not be empty")
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		if len(s) == 2 {
			return nil, fmt.Errorf("0x needs hex digits")
		}
		n, ok = new(big.Int).SetString(s[2:], 16)
	default:
		for _, c := range s {
			if c < '0' || c > '9' {
				return nil, fmt.Errorf("must be a non-negative decimal or 0x-hex integer, got %q", s)
			}
		}
		n, ok = new(big.Int).SetString(s, 10)
	}
	if !ok || n.Sign() < 0 {
		return nil, fmt.Errorf("must be a non-negative decimal or 0x-hex integer, got %q", s)
	}
	if n.Cmp(maxUint256) > 0 {
		return nil, fmt.Errorf("exceeds 2^256-1")
	}
	return n, nil
}

// uintField reads a JSON integer or a string quantity that fits in bits.
func uintField(v json.RawMessage, bits int) (uint64, error) {
	var s string
	if v[0] == '"' {
		var err error
		if s, err = jsonString(v); err != nil {
			return 0, fmt.Errorf("must be an integer")
		}
		q, err := parseQuantity(s)
		if err != nil {
			return 0, err
		}
		if !q.IsUint64() {
			return 0, fmt.Errorf("exceeds %d bits", bits)
		}
		return q.Uint64(), nil
	}
	n, err := strconv.ParseUint(string(v), 10, bits)
	if err != nil {
		return 0, fmt.Errorf("must be a non-negative integer of at most %d bits, got %s", bits, v)
	}
	return n, nil
}

func dataField(v json.RawMessage, max int) ([]byte, error) {
	s, err := jsonString(v)
	if err != nil {
		return nil, fmt.Errorf("must be a 0x-prefixed hex string")
	}
	if !strings.HasPrefix(s, "0x") {
		return nil, fmt.Errorf("must start with 0x")
	}
	if len(s)%2 != 0 {
		return nil, fmt.Errorf("must have an even number of hex digits")
	}
	if (len(s)-2)/2 > max {
		return nil, fmt.Errorf("%d bytes exceeds the limit of %d", (len(s)-2)/2, max)
	}
	b, err := hex.DecodeString(s[2:])
	if err != nil {
		return nil, fmt.Errorf("is not valid hex")
	}
	return b, nil
}

// txView is a transaction on the wire.
type txView struct {
	ID                   string          `json:"id"`
	ChainID              uint64          `json:"chainId"`
	From                 string          `json:"from"`
	To                   *string         `json:"to"`
	Nonce                *uint64         `json:"nonce,omitempty"` // absent while (or because) it holds none
	State                txm.State       `json:"state"`
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
	SendVia              string          `json:"sendVia,omitempty"` // the route its create named; omitted: its signer's
	ReorgCount           int             `json:"reorgCount"`
	Attempts             int             `json:"attempts"`
	Receipt              *receiptView    `json:"receipt,omitempty"`
	LastError            string          `json:"lastError,omitempty"`
	// Cost is the worst-case cost counted at creation and its parts;
	// absent for a transaction created before it was recorded.
	Cost *costView `json:"cost,omitempty"`
	// Effects are what the transaction's simulation showed it moves or
	// allows (at create, or at its last approval); a plain transfer's is
	// its value. Every reader of a transaction reads its simulation with
	// it; nil (omitted) only for a transaction read without it.
	Effects *[]txm.Effect `json:"effects,omitempty"`
	// Simulation is how the create was simulated ("simulateV1",
	// "call+estimate"); omitted for a plain transfer, which needs none.
	Simulation txm.SimMethod `json:"simulation,omitempty"`
	// SimulationRevert is the reason of a simulation that reverted and
	// was accepted under an advisory simulation policy.
	SimulationRevert string    `json:"simulationRevert,omitempty"`
	CreatedAt        time.Time `json:"createdAt"`
	UpdatedAt        time.Time `json:"updatedAt"`

	// Approval is what the transaction waits for (PENDING_APPROVAL), or
	// waited for, before it got a nonce; absent when it needed none.
	Approval *approvalView `json:"approval,omitempty"`
}

// approvalView is a transaction's approval on the wire: who asked, the
// rule it waits for (M, and the named approvers or their role), until
// when, the approvals so far and the rejection that ended it.
type approvalView struct {
	// Requester is the principal that created the transaction: an
	// approver decides knowing who asks, and never decides on its own.
	Requester    string          `json:"requester,omitempty"`
	Required     int             `json:"required"`
	Approvers    []string        `json:"approvers,omitempty"`
	ApproverRole txm.Role        `json:"approverRole,omitempty"`
	ExpiresAt    time.Time       `json:"expiresAt"`
	Approvals    []approvalEntry `json:"approvals"`
	Rejection    *rejectionEntry `json:"rejection,omitempty"`
}

type approvalEntry struct {
	Principal string    `json:"principal"`
	At        time.Time `json:"at"`
	Comment   string    `json:"comment,omitempty"`
}

type rejectionEntry struct {
	Principal string    `json:"principal"`
	At        time.Time `json:"at"`
	Reason    string    `json:"reason"`
}

func viewApproval(a *txm.Approval, requester string) *approvalView {
	if a == nil {
		return nil
	}
	v := &approvalView{Requester: requester, Required: a.Required, Approvers: a.Approvers, ApproverRole: a.ApproverRole, ExpiresAt: a.ExpiresAt.UTC(),
		Approvals: []approvalEntry{}}
	for _, d := range a.Approvals() {
		v.Approvals = append(v.Approvals, approvalEntry{Principal: d.Principal, At: d.At.UTC(), Comment: d.Text})
	}
	if r := a.Rejection(); r != nil {
		v.Rejection = &rejectionEntry{Principal: r.Principal, At: r.At.UTC(), Reason: r.Text}
	}
	return v
}

// costView is a transaction's worst-case cost, what its creator's caps
// counted, and its two fees: the execution fee bound and the L2 data fee.
type costView struct {
	// WorstCase is value + ExecutionFee + DataFee.
	WorstCase string `json:"worstCase"`
	// ExecutionFee is the gas limit at the fee ceiling (the lower of the
	// chain's fee cap and the creator's maxFeePerGas); absent when nothing
	// bounded it.
	ExecutionFee *string `json:"executionFee,omitempty"`
	// DataFee is the L2 data fee priced at creation: what the chain
	// charges beside the execution gas for posting the transaction to its
	// L1; "0" on a chain without one.
	DataFee string `json:"dataFee"`
}

// viewCost is t's costView, nil when its data fee was not recorded.
func viewCost(t *txm.Tx) *costView {
	if t.DataFee == nil {
		return nil
	}
	total := new(big.Int).Set(t.DataFee)
	if t.Value != nil {
		total.Add(total, t.Value)
	}
	if t.ExecutionFee != nil {
		total.Add(total, t.ExecutionFee)
	}
	return &costView{WorstCase: total.String(), ExecutionFee: bigString(t.ExecutionFee), DataFee: t.DataFee.String()}
}

type receiptView struct {
	BlockNumber       uint64  `json:"blockNumber"`
	BlockHash         string  `json:"blockHash"`
	Status            uint64  `json:"status"`
	GasUsed           uint64  `json:"gasUsed"`
	EffectiveGasPrice *string `json:"effectiveGasPrice,omitempty"`
}

func viewTx(t *txm.Tx) txView {
	v := txView{
		ID: t.ID, ChainID: t.ChainID, From: txm.CanonicalAddress(t.From), State: t.State,
		SubState: t.SubState, Value: "0", Data: "0x" + hex.EncodeToString(t.Data), Metadata: t.Metadata, SendVia: t.SendVia,
		ReorgCount: t.ReorgCount, Attempts: t.Attempts, LastError: t.LastError,
		CreatedAt: t.CreatedAt.UTC(), UpdatedAt: t.UpdatedAt.UTC(),
		MaxFeePerGas: bigString(t.MaxFeePerGas), MaxPriorityFeePerGas: bigString(t.MaxPriorityFeePerGas), GasPrice: bigString(t.GasPrice),
	}
	if !t.NoNonce {
		n := t.Nonce
		v.Nonce = &n
	}
	v.Approval = viewApproval(t.Approval, t.Principal)
	if t.To != nil {
		s := txm.CanonicalAddress(*t.To)
		v.To = &s
	}
	if t.RequestID != "" {
		v.RequestID = &t.RequestID
	}
	if t.Hash != nil {
		s := t.Hash.Hex()
		v.Hash = &s
	}
	if t.Value != nil {
		v.Value = t.Value.String()
	}
	if g := t.Gas(); g > 0 {
		v.GasLimit = &g
	}
	v.Cost = viewCost(t)
	v.Effects, v.Simulation, v.SimulationRevert = effectsOf(t), t.Simulation, t.SimulationRevert
	if t.Receipt != nil {
		v.Receipt = &receiptView{BlockNumber: t.Receipt.BlockNumber, BlockHash: t.Receipt.BlockHash.Hex(),
			Status: t.Receipt.Status, GasUsed: t.Receipt.GasUsed, EffectiveGasPrice: bigString(t.Receipt.EffectiveGasPrice)}
	}
	return v
}

// effectsOf is t's effects: its simulation's, or for a plain transfer (no
// data, not simulated) its value; nil when t was read without its
// simulation.
func effectsOf(t *txm.Tx) *[]txm.Effect {
	out := []txm.Effect{}
	switch {
	case t.Simulation != "":
		out = append(out, t.Effects...)
	case len(t.Data) > 0 || t.To == nil:
		return nil
	case t.Value != nil && t.Value.Sign() > 0:
		out = append(out, txm.Effect{Kind: txm.EffectNative, From: t.From, To: *t.To, Amount: t.Value})
	}
	return &out
}

func bigString(v *big.Int) *string {
	if v == nil {
		return nil
	}
	s := v.String()
	return &s
}
