package rpcproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common/hexutil"
)

// Lag makes the proxy answer as a node n blocks behind its upstream would
// (0: as the upstream does): its head is the upstream's head less n, the
// blocks above it, their transactions' receipts and the state after them
// are unknown to it, and a call at one of those blocks, by number or by
// hash, fails as geth fails it ("header not found"). Broadcasts and the
// pool are the upstream's: a lagging node still relays what it is sent.
// Each HTTP request sees one head, read from the upstream as it arrives.
//
// It stands for what no test here can run: a second node of the same
// chain that is behind, or a load-balanced provider URL whose backends
// differ in height.
func (p *Proxy) Lag(n uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lagBy = n
}

func (p *Proxy) lag() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lagBy
}

// lagged is one call as the lagging node answers it: either an answer of
// its own (done), or the upstream calls it needs and how their answers
// make its answer.
type lagged struct {
	done   *response
	calls  []upCall
	answer func(results []upResult) response
}

// upCall is a call sent to the upstream on behalf of a lagged one.
type upCall struct {
	Version string `json:"jsonrpc"`
	ID      int    `json:"id"`
	Method  string `json:"method"`
	Params  []any  `json:"params"`
}

// upResult is the upstream's answer to an upCall.
type upResult struct {
	ID     int             `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *RPCError       `json:"error"`
}

// errNotFound is geth's answer for state or a block it does not have.
var errNotFound = &RPCError{Code: -32000, Message: "header not found"}

// exchangeLagged answers reqs as a node p.lag() blocks behind would, with
// one upstream call for the head and one batch for the rest; the answers
// are returned in the order of reqs, with their ids.
func (p *Proxy) exchangeLagged(r *http.Request, reqs []request, by uint64) ([]json.RawMessage, error) {
	head, err := p.upstreamHead(r)
	if err != nil {
		return nil, err
	}
	var top uint64
	if head > by {
		top = head - by
	}
	plans := make([]lagged, len(reqs))
	var calls []upCall
	for i, req := range reqs {
		plans[i] = planLagged(req, top)
		for j := range plans[i].calls {
			plans[i].calls[j].ID = len(calls)
			plans[i].calls[j].Version = "2.0"
			calls = append(calls, plans[i].calls[j])
		}
	}
	results := map[int]upResult{}
	if len(calls) > 0 {
		body, err := json.Marshal(calls)
		if err != nil {
			return nil, fmt.Errorf("lag: encode: %w", err)
		}
		rep, err := p.forward(r, body)
		if err != nil {
			return nil, err
		}
		if rep.status != http.StatusOK {
			return nil, fmt.Errorf("lag: upstream answered HTTP %d", rep.status)
		}
		var got []upResult
		if err := json.Unmarshal(rep.body, &got); err != nil {
			return nil, fmt.Errorf("lag: decode upstream batch: %w", err)
		}
		for _, g := range got {
			results[g.ID] = g
		}
	}
	out := make([]json.RawMessage, len(reqs))
	for i, req := range reqs {
		var resp response
		if plans[i].done != nil {
			resp = *plans[i].done
		} else {
			rs := make([]upResult, len(plans[i].calls))
			for j, c := range plans[i].calls {
				res, ok := results[c.ID]
				if !ok {
					res = upResult{Error: &RPCError{Code: -32603, Message: "rpcproxy: no answer from upstream"}}
				}
				rs[j] = res
			}
			resp = plans[i].answer(rs)
		}
		resp.Version, resp.ID = "2.0", req.id
		b, err := json.Marshal(resp)
		if err != nil {
			return nil, fmt.Errorf("lag: encode answer: %w", err)
		}
		out[i] = b
	}
	return out, nil
}

// upstreamHead reads the upstream's head number.
func (p *Proxy) upstreamHead(r *http.Request) (uint64, error) {
	rep, err := p.forward(r, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}`))
	if err != nil {
		return 0, err
	}
	var res upResult
	if rep.status != http.StatusOK || json.Unmarshal(rep.body, &res) != nil || res.Error != nil {
		return 0, fmt.Errorf("lag: upstream head: HTTP %d %s", rep.status, rep.body)
	}
	var n hexutil.Uint64
	if err := json.Unmarshal(res.Result, &n); err != nil {
		return 0, fmt.Errorf("lag: upstream head: %w", err)
	}
	return uint64(n), nil
}

// planLagged decides how the lagging node, whose head is top, answers req.
func planLagged(req request, top uint64) lagged {
	var params []any
	if len(req.params) > 0 {
		if err := json.Unmarshal(req.params, &params); err != nil {
			return lagged{done: &response{Error: &RPCError{Code: -32602, Message: "rpcproxy: lag: params: " + err.Error()}}}
		}
	}
	pass := func(post func(json.RawMessage) response) lagged {
		return lagged{
			calls:  []upCall{{Method: req.method, Params: params}},
			answer: func(rs []upResult) response { return resultOr(rs[0], post) },
		}
	}
	topHex := hexutil.EncodeUint64(top)
	switch req.method {
	case "eth_blockNumber":
		return lagged{done: &response{Result: json.RawMessage(strconv.Quote(topHex))}}
	case "eth_getBlockByNumber", "eth_getHeaderByNumber", "eth_getBlockReceipts":
		if len(params) == 0 {
			return pass(nil)
		}
		n, ok := blockTag(params[0], top)
		if !ok {
			return pass(nil) // a hash or an object: only eth_getBlockReceipts takes one
		}
		if n > top {
			return lagged{done: &response{Result: json.RawMessage("null")}}
		}
		params[0] = hexutil.EncodeUint64(n)
		return pass(nil)
	case "eth_getBlockByHash", "eth_getHeaderByHash":
		return pass(func(res json.RawMessage) response { return nullAbove(res, "number", top) })
	case "eth_getTransactionReceipt":
		return pass(func(res json.RawMessage) response { return nullAbove(res, "blockNumber", top) })
	case "eth_getTransactionByHash":
		return pass(func(res json.RawMessage) response { return pendingAbove(res, top) })
	case "eth_getTransactionCount", "eth_getBalance", "eth_getCode", "eth_getStorageAt", "eth_call", "eth_estimateGas":
		return stateAt(req.method, params, top)
	case "eth_feeHistory":
		if len(params) >= 2 {
			if n, ok := blockTag(params[1], top); ok {
				params[1] = hexutil.EncodeUint64(min(n, top))
			}
		}
		return pass(nil)
	}
	return pass(nil)
}

// stateAt plans a call that reads state at a block (its last parameter,
// "latest" when absent): at top for "latest", unknown above top, and for a
// block given by hash, unknown when that block is above top.
func stateAt(method string, params []any, top uint64) lagged {
	at := map[string]int{"eth_getTransactionCount": 1, "eth_getBalance": 1, "eth_getCode": 1, "eth_getStorageAt": 2,
		"eth_call": 1, "eth_estimateGas": 1}[method]
	for len(params) <= at {
		params = append(params, "latest")
	}
	call := upCall{Method: method, Params: params}
	if obj, ok := params[at].(map[string]any); ok {
		if h, ok := obj["blockHash"].(string); ok {
			// The block by hash first: one above top is not known here.
			return lagged{
				calls: []upCall{{Method: "eth_getBlockByHash", Params: []any{h, false}}, call},
				answer: func(rs []upResult) response {
					if block := nullAbove(rs[0].Result, "number", top); rs[0].Error != nil || string(block.Result) == "null" {
						return response{Error: &RPCError{Code: -32000, Message: "header for hash not found"}}
					}
					return resultOr(rs[1], nil)
				},
			}
		}
		if n, ok := obj["blockNumber"]; ok {
			params[at] = n
		}
	}
	if s, ok := params[at].(string); ok && s == "pending" {
		return lagged{calls: []upCall{call}, answer: func(rs []upResult) response { return resultOr(rs[0], nil) }}
	}
	n, ok := blockTag(params[at], top)
	if !ok {
		return lagged{done: &response{Error: &RPCError{Code: -32602, Message: "rpcproxy: lag: block parameter"}}}
	}
	if n > top {
		return lagged{done: &response{Error: errNotFound}}
	}
	params[at] = hexutil.EncodeUint64(n)
	return lagged{calls: []upCall{call}, answer: func(rs []upResult) response { return resultOr(rs[0], nil) }}
}

// blockTag reads a block parameter as a height, with the tags that name
// the head at top (latest, pending, safe, finalized: a node this far
// behind is behind on them too, at worst up to its head); false for a
// hash or an object.
func blockTag(v any, top uint64) (uint64, bool) {
	s, ok := v.(string)
	if !ok {
		return 0, false
	}
	switch s {
	case "latest", "pending", "safe", "finalized":
		return top, true
	case "earliest":
		return 0, true
	}
	if strings.HasPrefix(s, "0x") && len(s) <= 18 {
		n, err := hexutil.DecodeUint64(s)
		return n, err == nil
	}
	return 0, false
}

// resultOr is the upstream's answer, passed through post when it has a
// result.
func resultOr(r upResult, post func(json.RawMessage) response) response {
	if r.Error != nil {
		return response{Error: r.Error}
	}
	if post == nil || string(r.Result) == "null" || len(r.Result) == 0 {
		if len(r.Result) == 0 {
			return response{Result: json.RawMessage("null")}
		}
		return response{Result: r.Result}
	}
	return post(r.Result)
}

// nullAbove is res, or null when its height field is above top.
func nullAbove(res json.RawMessage, field string, top uint64) response {
	if h, ok := height(res, field); ok && h > top {
		return response{Result: json.RawMessage("null")}
	}
	return response{Result: res}
}

// pendingAbove is a transaction as a node that has not seen its block
// shows it: in the pool.
func pendingAbove(res json.RawMessage, top uint64) response {
	h, ok := height(res, "blockNumber")
	if !ok || h <= top {
		return response{Result: res}
	}
	var m map[string]any
	if json.Unmarshal(res, &m) != nil {
		return response{Result: res}
	}
	m["blockHash"], m["blockNumber"], m["transactionIndex"] = nil, nil, nil
	b, err := json.Marshal(m)
	if err != nil {
		return response{Result: res}
	}
	return response{Result: b}
}

// height reads a hex quantity field of a JSON object.
func height(res json.RawMessage, field string) (uint64, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(res, &m) != nil {
		return 0, false
	}
	var n hexutil.Uint64
	if raw, ok := m[field]; !ok || json.Unmarshal(raw, &n) != nil {
		return 0, false
	}
	return uint64(n), true
}
