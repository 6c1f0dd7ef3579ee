package app

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/txm"
)

// simCheck is what judging a create's simulation needs: the creator's
// policy.
type simCheck struct {
	pol txm.Policy
}

// needsSimulation reports whether r must be simulated before it gets a
// nonce: everything but a plain transfer, a call without data to an address
// without code, whose effect is its value (the code check is cached per
// address, so that plain transfers cost no call). A policy that skips
// estimation trusts a create without data that gives its gas limit to be a
// plain transfer without the code check, as it skipped its estimate; a
// call with data is simulated whatever the policy.
func (c *CreateTx) needsSimulation(ctx context.Context, r *txm.Request, pol txm.Policy) (bool, error) {
	if len(r.Data) > 0 || r.To == nil {
		return true, nil
	}
	if r.GasLimit > 0 && pol.SkipEstimation {
		return false, nil
	}
	cctx, span := c.metrics.StartClientSpan(ctx, "chain.has_code")
	has, err := c.chains[r.ChainID].HasCode(cctx, []common.Address{*r.To})
	span.End()
	if err != nil {
		return false, fmt.Errorf("%w: code check: %w", ErrChainUnavailable, err)
	}
	return has[0], nil
}

// simulateBatch simulates the calls of batch that need it, in one request
// per chain, judges each, hands refuse the waiters refused (which then
// leave the batch) and returns the rest. A chain that cannot be asked
// refuses its calls as a failed estimate did: the chain is unavailable.
func (c *CreateTx) simulateBatch(ctx context.Context, batch []*waiter, refuse func(*waiter, error)) []*waiter {
	var chains []uint64
	byChain := map[uint64][]*waiter{}
	for _, w := range batch {
		if w.sim == nil {
			continue
		}
		if _, ok := byChain[w.key.chainID]; !ok {
			chains = append(chains, w.key.chainID)
		}
		byChain[w.key.chainID] = append(byChain[w.key.chainID], w)
	}
	if len(chains) == 0 {
		return batch
	}
	refused := map[*waiter]bool{}
	for _, id := range chains {
		ws := byChain[id]
		calls := make([]txm.SimCall, len(ws))
		for i, w := range ws {
			r := w.req
			calls[i] = txm.SimCall{From: r.From, To: r.To, Value: r.Value, Data: r.Data, Gas: r.GasLimit,
				MaxFeePerGas: r.MaxFeePerGas, MaxPriorityFeePerGas: r.MaxPriorityFeePerGas, GasPrice: r.GasPrice}
		}
		sctx, span := c.metrics.StartClientSpan(ctx, "chain.simulate")
		span.SetInt("txfence.batch_size", len(calls))
		results, err := c.chains[id].Simulate(sctx, calls)
		span.End()
		var simulated []*waiter
		for i, w := range ws {
			if err == nil {
				err := c.judgeSimulation(w, results[i])
				if err == nil {
					simulated = append(simulated, w)
					continue
				}
				refuse(w, err)
			} else {
				refuse(w, fmt.Errorf("%w: simulate: %w", ErrChainUnavailable, err))
			}
			refused[w] = true
		}
		if len(simulated) == 0 {
			continue
		}
		// Their gas is known: their data fees, in one more request.
		reqs := make([]*txm.Request, len(simulated))
		for i, w := range simulated {
			reqs[i] = w.req
		}
		priced := c.priceDataFees(ctx, id, reqs)
		for _, w := range simulated {
			err := priced
			if err == nil {
				err = c.judgeCost(w)
			}
			if err != nil {
				refuse(w, err)
				refused[w] = true
			}
		}
	}
	if len(refused) == 0 {
		return batch
	}
	kept := make([]*waiter, 0, len(batch)-len(refused))
	for _, w := range batch {
		if !refused[w] {
			kept = append(kept, w)
		}
	}
	return kept
}

// judgeSimulation applies a simulation's result to w's request: the
// method, the effects and the gas estimate are recorded in it, and a call
// that would fail is refused (a revert with its decoded reason), unless the
// creator's policy makes simulation advisory, in which case a revert is
// recorded and the caller's gas limit signed with. Then the policy's rules
// on the effects judge it. Its data fee is priced next, and judgeCost comes
// last.
func (c *CreateTx) judgeSimulation(w *waiter, res txm.SimResult) error {
	r, pol := w.req, w.sim.pol
	r.Simulation = res.Method
	var funds *txm.InsufficientFundsError
	var failed *txm.ExecutionError
	switch {
	case errors.As(res.Err, &funds):
		return fundsInvalid(funds)
	case errors.As(res.Err, &failed):
		// The node ran the call and it fails (out of gas at any limit, an
		// invalid opcode, ...): no retry changes that.
		return failed
	case res.Err != nil:
		return fmt.Errorf("%w: simulate: %w", ErrChainUnavailable, res.Err)
	case res.Reverted:
		// The caller's error ABI was checked before the request was queued.
		rev, _ := c.chains[r.ChainID].DecodeRevert(res.RevertData, r.ErrorABI)
		if !pol.SimulationAdvisory {
			return &txm.RevertedError{Revert: rev}
		}
		if r.GasLimit == 0 {
			v := &txm.ValidationError{}
			v.Add("gasLimit", "the simulation reverts (%s), so there is no gas estimate: under an advisory simulation policy such a create must give its gas limit",
				rev.String())
			return v
		}
		r.SimulationRevert = rev.String()
	default:
		r.Effects = res.Effects
		if r.GasLimit == 0 {
			if res.Gas > c.cfg.MaxGasLimit {
				v := &txm.ValidationError{}
				v.Add("gasLimit", "the estimate %d exceeds the cap %d", res.Gas, c.cfg.MaxGasLimit)
				return v
			}
			r.GasEstimate = res.Gas
		}
	}
	return c.checkEffects(pol, r)
}

// judgeCost runs the checks that need a simulated create's gas and data
// fee: the policy's caps on gas and cost. Last, a create that passed them
// all and that a rule of the policy holds for approval answers
// *heldForApproval.
func (c *CreateTx) judgeCost(w *waiter) error {
	r, pol := w.req, w.sim.pol
	if err := c.checkCost(pol, r); err != nil {
		return err
	}
	if rule := approvalFor(pol, r); rule != nil {
		return &heldForApproval{rule: *rule}
	}
	return nil
}

// plainEffects are the effects of a create that is not simulated (a plain
// transfer): its value, if any.
func plainEffects(r *txm.Request) []txm.Effect {
	if r.To == nil || r.Value == nil || r.Value.Sign() == 0 {
		return nil
	}
	return []txm.Effect{{Kind: txm.EffectNative, From: r.From, To: *r.To, Amount: new(big.Int).Set(r.Value)}}
}

// checkEffects is where the creator's policy judges what the transaction
// moves or allows (r.Effects: the simulation's, or a plain transfer's
// value), before it gets a nonce; a refusal is a *txm.Refusal naming the
// rule. A simulation that could not show token effects (no eth_simulateV1)
// is refused under a policy that judges them.
func (c *CreateTx) checkEffects(pol txm.Policy, r *txm.Request) error {
	return pol.CheckSimulation(r.ChainID, r.From, txm.SimResult{
		Method: r.Simulation, Effects: r.Effects, Reverted: r.SimulationRevert != ""})
}
