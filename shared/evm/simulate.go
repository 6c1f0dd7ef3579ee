package evm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.Simulator = (*Client)(nil)

// How Simulate asks the node, and why:
//
// Every call is simulated on its own against the latest block. Calls in
// one eth_simulateV1 block run in sequence, and so do the blocks of one
// request, each seeing the state the earlier ones left: the creates of an
// allocation batch come from different signers and must each be judged on
// the chain as it is, not after the others. So each call is its own
// eth_simulateV1 request (one block, one call), and all of them go out as
// one JSON-RPC batch. That also keeps one call's refusal (geth fails the
// whole request when a call cannot be paid for) from taking the others'
// results with it, and gives each call the node's whole gas cap. Creates of the same signer are judged the same way,
// each against the latest state, not after its predecessors in the batch:
// a flow whose transactions depend on the signer's own pending ones is what
// an advisory simulation policy is for.
//
// The gas is the node's gas estimate, not the simulation's gasUsed: gasUsed
// is after refunds and below what the call needs as a limit (the 63/64 rule
// of inner calls, the SSTORE stipend check), which geth's estimator finds by
// running the call at candidate limits. So each call's eth_estimateGas rides
// in the same batch, beside its simulation: one round trip for both.
//
// A node that does not serve eth_simulateV1 answers each of its requests
// with "method not found" in that batch; the estimates of the batch still
// stand, and one more batch of eth_call completes the results. The client
// then asks eth_call and eth_estimateGas directly (one batch) until
// SimulateRecheck has passed, and tries eth_simulateV1 again after it.

// simState remembers which method the chain's node serves.
type simState struct {
	mu      sync.Mutex
	method  txm.SimMethod // last used; "" before the first simulation
	retryAt time.Time     // with method SimCallEstimate: when to try eth_simulateV1 again
}

// useSimulateV1 reports whether the next simulation should try
// eth_simulateV1.
func (c *Client) useSimulateV1() bool {
	c.sim.mu.Lock()
	defer c.sim.mu.Unlock()
	return c.sim.method != txm.SimCallEstimate || !time.Now().Before(c.sim.retryAt)
}

// noteSimMethod records the method that answered; for SimCallEstimate, the
// time of the next try of eth_simulateV1.
func (c *Client) noteSimMethod(m txm.SimMethod) {
	c.sim.mu.Lock()
	defer c.sim.mu.Unlock()
	if m == txm.SimCallEstimate && (c.sim.method != txm.SimCallEstimate || !time.Now().Before(c.sim.retryAt)) {
		c.sim.retryAt = time.Now().Add(c.opts.SimulateRecheck)
	}
	c.sim.method = m
}

// SimulationMethod is the method the last simulation used; "" before the
// first.
func (c *Client) SimulationMethod() txm.SimMethod {
	c.sim.mu.Lock()
	defer c.sim.mu.Unlock()
	return c.sim.method
}

// simArgs is a call's transaction object for eth_simulateV1, eth_call and
// eth_estimateGas.
type simArgs struct {
	From                 common.Address  `json:"from"`
	To                   *common.Address `json:"to,omitempty"`
	Gas                  *hexutil.Uint64 `json:"gas,omitempty"`
	Value                *hexutil.Big    `json:"value,omitempty"`
	Data                 hexutil.Bytes   `json:"data,omitempty"`
	MaxFeePerGas         *hexutil.Big    `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *hexutil.Big    `json:"maxPriorityFeePerGas,omitempty"`
	GasPrice             *hexutil.Big    `json:"gasPrice,omitempty"`
}

// simArgsOf is call's transaction object. Its fees are sent only with a gas
// limit, or to the estimate (withFees): without a limit, the node runs the
// call with the block's whole gas limit, whose price at the call's fee the
// signer may not have, and a refusal for that would say nothing about the
// transaction. The estimate bounds its limits by what the signer can pay.
func simArgsOf(call txm.SimCall, withFees bool) simArgs {
	a := simArgs{From: call.From, To: call.To, Data: call.Data}
	if call.Gas > 0 {
		a.Gas = (*hexutil.Uint64)(&call.Gas)
		withFees = true
	}
	if call.Value != nil {
		a.Value = (*hexutil.Big)(call.Value)
	}
	if withFees {
		a.MaxFeePerGas = (*hexutil.Big)(call.MaxFeePerGas)
		a.MaxPriorityFeePerGas = (*hexutil.Big)(call.MaxPriorityFeePerGas)
		a.GasPrice = (*hexutil.Big)(call.GasPrice)
	}
	return a
}

// simRequest is eth_simulateV1's first parameter.
type simRequest struct {
	BlockStateCalls        []simBlock `json:"blockStateCalls"`
	TraceTransfers         bool       `json:"traceTransfers"`
	Validation             bool       `json:"validation"`
	ReturnFullTransactions bool       `json:"returnFullTransactions"`
}

type simBlock struct {
	Calls []simArgs `json:"calls"`
}

// simBlockResult is the part of a simulated block txfence reads.
type simBlockResult struct {
	Calls []simCallResult `json:"calls"`
}

type simCallResult struct {
	ReturnData hexutil.Bytes   `json:"returnData"`
	Logs       []simLog        `json:"logs"`
	Status     *hexutil.Uint64 `json:"status"`
	Error      *simCallError   `json:"error"`
}

type simLog struct {
	Address common.Address `json:"address"`
	Topics  []common.Hash  `json:"topics"`
	Data    hexutil.Bytes  `json:"data"`
}

type simCallError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// revertCode is the JSON-RPC code of "execution reverted" (geth, reth,
// Nethermind, Besu).
const revertCode = 3

// simElem is one JSON-RPC call of a simulation batch, its result kept raw
// so that a retried batch starts clean.
type simElem struct {
	method string
	args   []any
	raw    json.RawMessage
	err    error
}

// Simulate simulates each call independently against the latest block,
// with eth_simulateV1 and transfer tracing where the node serves it and
// eth_call plus eth_estimateGas where it does not, in one batched round
// trip (several when the calls exceed MaxBatch; one more the first time a
// node turns out not to serve eth_simulateV1). See the comment at the top
// of this file for why. A call that reverts, or that the node refuses for
// a fault of the call's own, is a result (SimResult.Reverted, .Err); the
// error means the node could not be asked or gave an unusable answer.
func (c *Client) Simulate(ctx context.Context, calls []txm.SimCall) ([]txm.SimResult, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	for i, call := range calls {
		if call.GasPrice != nil && (call.MaxFeePerGas != nil || call.MaxPriorityFeePerGas != nil) {
			return nil, fmt.Errorf("simulate: call %d: %w: both a legacy gas price and EIP-1559 fees", i, txm.ErrInvalid)
		}
	}
	estimates := make([]simElem, len(calls))
	for i, call := range calls {
		estimates[i] = simElem{method: "eth_estimateGas", args: []any{simArgsOf(call, true), "latest"}}
	}
	out, err := c.simulate(ctx, calls, estimates)
	if err != nil {
		return nil, fmt.Errorf("simulate: %w", err)
	}
	c.noteSimMethod(out[0].Method)
	return out, nil
}

func (c *Client) simulate(ctx context.Context, calls []txm.SimCall, estimates []simElem) ([]txm.SimResult, error) {
	var ethCalls []simElem
	if c.useSimulateV1() {
		sims := make([]simElem, len(calls))
		for i, call := range calls {
			sims[i] = simElem{method: "eth_simulateV1", args: []any{simRequest{
				BlockStateCalls: []simBlock{{Calls: []simArgs{simArgsOf(call, false)}}},
				TraceTransfers:  true,
			}, "latest"}}
		}
		if err := c.sendSimBatch(ctx, interleave(sims, estimates)); err != nil {
			return nil, err
		}
		if !anyMethodMissing(sims) {
			return c.simulateV1Results(calls, sims, estimates)
		}
		// The estimates of this batch stand: only the calls are missing.
		ethCalls = callElems(calls)
		if err := c.sendSimBatch(ctx, interleave(ethCalls, nil)); err != nil {
			return nil, err
		}
	} else {
		ethCalls = callElems(calls)
		if err := c.sendSimBatch(ctx, interleave(ethCalls, estimates)); err != nil {
			return nil, err
		}
	}
	return c.fallbackResults(calls, ethCalls, estimates)
}

// callElems is an eth_call at the latest block per call.
func callElems(calls []txm.SimCall) []simElem {
	out := make([]simElem, len(calls))
	for i, call := range calls {
		out[i] = simElem{method: "eth_call", args: []any{simArgsOf(call, false), "latest"}}
	}
	return out
}

// interleave is a[0], b[0], a[1], b[1], ... (a alone when b is nil), so
// that when the calls exceed an even MaxBatch a call's two requests still
// go in the same batch.
func interleave(a, b []simElem) []*simElem {
	out := make([]*simElem, 0, len(a)+len(b))
	for i := range a {
		out = append(out, &a[i])
		if b != nil {
			out = append(out, &b[i])
		}
	}
	return out
}

func anyMethodMissing(elems []simElem) bool {
	for _, e := range elems {
		if e.err != nil && methodMissing(e.err) {
			return true
		}
	}
	return false
}

// sendSimBatch sends elems in JSON-RPC batches of at most MaxBatch calls,
// each retried as a whole on failover (see do), and records each call's raw
// result or error.
func (c *Client) sendSimBatch(ctx context.Context, list []*simElem) error {
	batch := make([]rpc.BatchElem, len(list))
	for lo := 0; lo < len(list); lo += c.opts.MaxBatch {
		hi := min(lo+c.opts.MaxBatch, len(list))
		err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
			for i := lo; i < hi; i++ {
				list[i].raw, list[i].err = nil, nil
				batch[i] = rpc.BatchElem{Method: list[i].method, Args: list[i].args, Result: &list[i].raw}
			}
			return rc.BatchCallContext(ctx, batch[lo:hi])
		})
		if err != nil {
			return err
		}
	}
	for i, e := range list {
		if batch[i].Error != nil {
			e.err = c.hideURLs(batch[i].Error)
		}
	}
	return nil
}

// simulateV1Results reads the answers of an eth_simulateV1 batch.
func (c *Client) simulateV1Results(calls []txm.SimCall, sims, estimates []simElem) ([]txm.SimResult, error) {
	return eachResult(len(calls), func(i int) (txm.SimResult, error) { return c.simulateV1Result(sims[i], estimates[i]) })
}

// eachResult reads n answers with one; any unusable answer fails them all,
// each named by its call's index.
func eachResult(n int, one func(i int) (txm.SimResult, error)) ([]txm.SimResult, error) {
	out := make([]txm.SimResult, n)
	var errs []error
	for i := range out {
		r, err := one(i)
		if err != nil {
			errs = append(errs, fmt.Errorf("call %d: %w", i, err))
			continue
		}
		out[i] = r
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

func (c *Client) simulateV1Result(sim, estimate simElem) (txm.SimResult, error) {
	r := txm.SimResult{Method: txm.SimSimulateV1}
	if sim.err != nil {
		// The whole request refused: geth checks the call as a transaction
		// first (insufficient funds for the value, intrinsic gas, ...).
		return failed(r, sim.err)
	}
	var blocks []simBlockResult
	if err := json.Unmarshal(sim.raw, &blocks); err != nil {
		return r, fmt.Errorf("eth_simulateV1: decode answer: %w", err)
	}
	if len(blocks) != 1 || len(blocks[0].Calls) != 1 {
		return r, fmt.Errorf("eth_simulateV1: node answered %d blocks for one call", len(blocks))
	}
	res := blocks[0].Calls[0]
	if res.Status == nil {
		return r, errors.New("eth_simulateV1: call result has no status")
	}
	if *res.Status != 1 {
		if res.Error != nil && (res.Error.Code == revertCode || Classify(errors.New(res.Error.Message)) == txm.ReasonReverted) {
			r.Reverted = true
			r.RevertData = revertDataOf(res.Error.Data, res.ReturnData)
			return r, nil
		}
		msg := "execution failed"
		if res.Error != nil {
			msg = res.Error.Message
		}
		r.Err = &txm.ExecutionError{Reason: nodeReason(msg)}
		return r, nil
	}
	logs := make([]*types.Log, len(res.Logs))
	for i, l := range res.Logs {
		logs[i] = &types.Log{Address: l.Address, Topics: l.Topics, Data: l.Data}
	}
	r.Effects = DecodeEffects(logs)
	return c.withEstimate(r, estimate)
}

// fallbackResults reads the answers of eth_call and eth_estimateGas; the
// effects are the top-level native value, all a call's result shows.
func (c *Client) fallbackResults(calls []txm.SimCall, ethCalls, estimates []simElem) ([]txm.SimResult, error) {
	return eachResult(len(calls), func(i int) (txm.SimResult, error) {
		return c.fallbackResult(calls[i], ethCalls[i], estimates[i])
	})
}

func (c *Client) fallbackResult(call txm.SimCall, ethCall, estimate simElem) (txm.SimResult, error) {
	r := txm.SimResult{Method: txm.SimCallEstimate}
	if ethCall.err != nil {
		return failed(r, ethCall.err)
	}
	if call.Value != nil && call.Value.Sign() > 0 {
		// A creation's address is not known here: the zero address stands
		// for it.
		var to common.Address
		if call.To != nil {
			to = *call.To
		}
		r.Effects = []txm.Effect{{Kind: txm.EffectNative, From: call.From, To: to, Amount: new(big.Int).Set(call.Value)}}
	}
	return c.withEstimate(r, estimate)
}

// withEstimate sets r's gas from the estimate, plus GasMarginPercent, or
// records the estimate's refusal of a call the simulation ran: it runs the
// call at other gas limits, and with the call's fees.
func (c *Client) withEstimate(r txm.SimResult, estimate simElem) (txm.SimResult, error) {
	if estimate.err != nil {
		r.Effects = nil
		return failed(r, estimate.err)
	}
	var gas hexutil.Uint64
	if err := json.Unmarshal(estimate.raw, &gas); err != nil {
		return r, fmt.Errorf("eth_estimateGas: decode answer: %w", err)
	}
	r.Gas = uint64(gas) + uint64(gas)*c.opts.GasMarginPercent/100
	return r, nil
}

// failed records in r the node's refusal err of the call: a revert, funds
// the signer does not have, or another fault of the call's own. Any other
// error, one that says the node could not answer, is returned.
func failed(r txm.SimResult, err error) (txm.SimResult, error) {
	if re := revertError(err); re != nil {
		r.Reverted, r.RevertData = true, re.Data
		return r, nil
	}
	if fe := insufficientFunds(err); fe != nil {
		r.Err = fe
		return r, nil
	}
	// A refusal the call's own fields decide (a gas limit below the
	// intrinsic or calldata floor cost, above the block's, init code too
	// large), whatever the code: geth's eth_simulateV1 answers some with
	// -32603.
	var rpcErr rpc.Error
	if errors.As(err, &rpcErr) && !failover(err) && Classify(err).Permanent() {
		r.Err = &txm.ExecutionError{Reason: nodeReason(rpcErr.Error()), Err: err}
		return r, nil
	}
	if xe := executionFailure(err); xe != nil {
		r.Err = xe
		return r, nil
	}
	return r, err
}

// revertDataOf is the revert data of a simulated call: the error's data
// (geth: a hex string) or, from nodes that leave it out, the return data.
func revertDataOf(errData json.RawMessage, returnData []byte) []byte {
	var s string
	if len(errData) > 0 && json.Unmarshal(errData, &s) == nil && strings.HasPrefix(s, "0x") {
		if b, err := hexutil.Decode(s); err == nil {
			if len(b) == 0 {
				return nil
			}
			return b
		}
	}
	if len(returnData) == 0 {
		return nil
	}
	return returnData
}
