package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
)

// The faults, in the order they are injected.
const (
	faultFundingDip  = "funding-dip"        // a transfer above the signer's balance; healed by funding the signer
	faultFeeSpike    = "fee-spike"          // full blocks push the base fee above the first attempts' fee caps
	faultRPCErrors   = "rpc-errors"         // -32603 answers to eth_maxPriorityFeePerGas, eth_getTransactionReceipt, eth_sendRawTransaction
	faultRPCTimeouts = "rpc-timeouts"       // answers slower than the servers' call timeout, and dropped connections
	faultDropped     = "dropped-broadcasts" // eth_sendRawTransaction answered as accepted, never forwarded
	faultLagging     = "lagging-endpoint"   // a second endpoint 16 blocks behind, with 502s that make calls fail over between the two
	faultKill        = "kill"               // SIGKILL of a server, restarted after the window
	faultPause       = "pause"              // SIGSTOP of a server past its lease, then SIGCONT
	faultDBRestart   = "db-restart"         // PostgreSQL restarted under the running servers
	faultReorg       = "reorg"              // a 1-block reorg, then one deeper than the confirmation depth
)

// FaultNames lists every fault, in the order a soak injects them.
var FaultNames = []string{faultFundingDip, faultFeeSpike, faultRPCErrors, faultRPCTimeouts, faultDropped,
	faultLagging, faultKill, faultPause, faultDBRestart, faultReorg}

// faultNone, alone in Config.Faults, injects no fault: the load alone.
const faultNone = "none"

func knownFault(name string) bool { return name == faultNone || slices.Contains(FaultNames, name) }

// rpcErrorMethods get JSON-RPC error answers during rpc-errors.
var rpcErrorMethods = []string{"eth_maxPriorityFeePerGas", "eth_getTransactionReceipt", "eth_sendRawTransaction"}

// rpcSlowMethods get slow answers and dropped connections during
// rpc-timeouts.
var rpcSlowMethods = []string{"eth_getTransactionReceipt", "eth_sendRawTransaction", "eth_getBlockByNumber", "eth_getTransactionCount"}

// callTimeout is the servers' per-call RPC timeout (shared/evm's default);
// a slow answer takes longer.
const callTimeout = 5 * time.Second

// plan is the configured faults in injection order.
func (r *run) plan() []string {
	var out []string
	for _, f := range FaultNames {
		if slices.Contains(r.cfg.Faults, f) {
			out = append(out, f)
		}
	}
	return out
}

// inject runs one fault for its window and heals it.
func (r *run) inject(ctx context.Context, name string) {
	r.phase.Store(name)
	w := window{name: name, start: time.Now()}
	var detail string
	var err error
	switch name {
	case faultFundingDip:
		detail, err = r.fundingDip(ctx)
	case faultFeeSpike:
		detail, err = r.feeSpike(ctx)
	case faultRPCErrors:
		detail = r.rpcErrors(ctx)
	case faultRPCTimeouts:
		detail = r.rpcTimeouts(ctx)
	case faultDropped:
		detail = r.droppedBroadcasts(ctx)
	case faultLagging:
		detail = r.laggingEndpoint(ctx)
	case faultKill:
		detail, err = r.kill(ctx)
	case faultPause:
		detail, err = r.pause(ctx)
	case faultDBRestart:
		detail, err = r.dbRestart(ctx)
	case faultReorg:
		detail, err = r.reorg(ctx)
	}
	w.end, w.detail = time.Now(), detail
	if err != nil {
		w.detail += " (fault failed: " + err.Error() + ")"
		r.out.printf("soak: fault %s could not be injected: %v", name, err)
	}
	r.winMu.Lock()
	r.windows = append(r.windows, w)
	r.winMu.Unlock()
	r.out.printf("soak: fault %s: %s [%s]", name, w.detail, w.end.Sub(w.start).Round(100*time.Millisecond))
	r.phase.Store("after-" + name)
}

// fundingDip asks for a transfer larger than a signer's balance, which no
// node accepts until the signer is funded; after the window the signer is
// funded.
func (r *run) fundingDip(ctx context.Context) (string, error) {
	signer := r.s.Signers[r.intn(len(r.s.Signers))]
	bal, err := r.s.Chain.Backend.Client().BalanceAt(ctx, signer, nil)
	if err != nil {
		return "", fmt.Errorf("balance: %w", err)
	}
	value := new(big.Int).Add(bal, big.NewInt(1e18))
	r.faults.Add(1)
	cr := r.creates.create(r.cfg.Txs, signer, kindDip, value)
	r.sleep(ctx, r.cfg.Window)
	topUp := new(big.Int).Add(value, new(big.Int).Mul(big.NewInt(10), big.NewInt(1e18)))
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.s.Fund(fctx, signer, topUp); err != nil {
		return "", err
	}
	return fmt.Sprintf("signer %s asked to send %s wei holding %s (tx %s); funded %s wei after %s",
		signer.Hex(), value, bal, cr.TxID, topUp, r.cfg.Window), nil
}

// feeSpike fills blocks until the base fee is above the highest fee cap the
// attempts of the last ten seconds offered, and a window more.
func (r *run) feeSpike(ctx context.Context) (string, error) {
	base, err := r.s.BaseFee(ctx)
	if err != nil {
		return "", err
	}
	var s string
	if err := r.db.QueryRow(ctx, `SELECT coalesce(max(max_fee_per_gas), 0)::text FROM tx_attempt
WHERE created_at > now() - interval '10 seconds'`).Scan(&s); err != nil {
		return "", fmt.Errorf("recent fee caps: %w", err)
	}
	offered, _ := new(big.Int).SetString(s, 10)
	if offered == nil || offered.Sign() == 0 {
		offered = new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(2)), big.NewInt(1))
	}
	// Past the fee caps, the spike goes on for a window's worth of blocks:
	// the base fee keeps climbing 10% a block, so attempts signed during
	// the spike are soon outrun too and only replacements get mined.
	n := min(blocksToExceed(base, offered, blockGasLimit)+max(4, int(r.cfg.Window/r.cfg.BlockTime)), 80)
	if err := r.s.FeeSpike(n); err != nil {
		return "", err
	}
	r.faults.Add(1)
	peak := new(big.Int).Set(base)
	deadline := time.Now().Add(time.Duration(3*n)*r.cfg.BlockTime + 30*time.Second)
	for r.s.FeeSpikeRunning() && time.Now().Before(deadline) && ctx.Err() == nil {
		if bf, err := r.s.BaseFee(ctx); err == nil && bf.Cmp(peak) > 0 {
			peak = bf
		}
		r.sleep(ctx, r.cfg.BlockTime/2)
	}
	r.s.EndFeeSpike()
	if bf, err := r.s.BaseFee(ctx); err == nil && bf.Cmp(peak) > 0 {
		peak = bf
	}
	over := "above"
	if peak.Cmp(offered) <= 0 {
		over = "NOT above"
	}
	return fmt.Sprintf("%d full blocks took the base fee from %s to %s wei, %s the highest recent fee cap %s", n, base, peak, over, offered), nil
}

// blocksToExceed is how many blocks filled to 9/10 of gasLimit take the
// base fee from base past target (EIP-1559: +1/8 of the excess over the
// target, at least 1 wei, per block).
func blocksToExceed(base, target *big.Int, gasLimit uint64) int {
	t, used := gasLimit/2, gasLimit/10*9
	b := new(big.Int).Set(base)
	n := 0
	for ; b.Cmp(target) <= 0 && n < 1000; n++ {
		d := new(big.Int).Mul(b, new(big.Int).SetUint64(used-t))
		d.Div(d, new(big.Int).SetUint64(t))
		d.Div(d, big.NewInt(8))
		if d.Sign() == 0 {
			d.SetInt64(1)
		}
		b.Add(b, d)
	}
	return n
}

// hook returns a Before hook that answers a call with f with probability p,
// counting the faulted calls.
func (r *run) hook(p float64, f rpcproxy.Fault, hits *int64) func(json.RawMessage) *rpcproxy.Fault {
	return func(json.RawMessage) *rpcproxy.Fault {
		if !r.chance(p) {
			return nil
		}
		r.rngMu.Lock()
		*hits++
		r.rngMu.Unlock()
		f := f
		return &f
	}
}

func (r *run) hits(n *int64) int64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return *n
}

// rpcErrors answers half the calls of rpcErrorMethods with -32603.
func (r *run) rpcErrors(ctx context.Context) string {
	var n int64
	for _, m := range rpcErrorMethods {
		r.s.Proxy.Before(m, r.hook(0.5, rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32603, Message: "internal error"}}, &n))
		r.faults.Add(1)
	}
	r.sleep(ctx, r.cfg.Window)
	for _, m := range rpcErrorMethods {
		r.s.Proxy.Before(m, nil)
	}
	return fmt.Sprintf("-32603 for half the calls of %v: %d answered so", rpcErrorMethods, r.hits(&n))
}

// rpcTimeouts answers a quarter of the calls of rpcSlowMethods after the
// servers' call timeout (the node still gets them, late), and drops the
// connection of another sixth.
func (r *run) rpcTimeouts(ctx context.Context) string {
	var slow, dropped int64
	for _, m := range rpcSlowMethods {
		slowHook := r.hook(0.25, rpcproxy.Fault{Delay: callTimeout + time.Second}, &slow)
		dropHook := r.hook(0.2, rpcproxy.Fault{Drop: true}, &dropped)
		r.s.Proxy.Before(m, func(p json.RawMessage) *rpcproxy.Fault {
			if f := slowHook(p); f != nil {
				return f
			}
			return dropHook(p)
		})
	}
	r.faults.Add(2)
	r.sleep(ctx, r.cfg.Window)
	for _, m := range rpcSlowMethods {
		r.s.Proxy.Before(m, nil)
	}
	return fmt.Sprintf("calls of %v: %d answered after %s, %d connections dropped", rpcSlowMethods, r.hits(&slow), callTimeout+time.Second, r.hits(&dropped))
}

// droppedBroadcasts swallows half the broadcasts: the servers are told the
// node took them; the node never sees them.
func (r *run) droppedBroadcasts(ctx context.Context) string {
	var n int64
	r.s.Proxy.Before("eth_sendRawTransaction", r.hook(0.5, rpcproxy.Fault{Swallow: true}, &n))
	r.faults.Add(1)
	r.sleep(ctx, r.cfg.Window)
	r.s.Proxy.Before("eth_sendRawTransaction", nil)
	return fmt.Sprintf("%d broadcasts answered as accepted and never forwarded", r.hits(&n))
}

// laggingBlocks is how far behind the chain the second endpoint is during
// lagging-endpoint: 8s of the soak's 500ms blocks, longer than the
// servers' stale-receipt timeout (5s), so that transactions whose receipt
// checks failed over to it are left to the finality sweep's look while it
// still has not seen their blocks.
const laggingBlocks = 16

// Methods whose calls get 502s during lagging-endpoint: the first endpoint
// fails nine in ten receipt look-ups, the lagging one half of the nonce and
// head reads, so that one pass reads some from each.
var (
	laggingFirstMethods = []string{"eth_getTransactionReceipt", "eth_getBlockReceipts"}
	laggingOwnMethods   = []string{"eth_getTransactionCount", "eth_blockNumber", "eth_getBlockByNumber"}
)

// laggingEndpoint brings the second endpoint up as a node laggingBlocks
// behind the chain, and makes the servers' calls fail over between the two
// (HTTP 502s for half the calls of some methods on each) for the window;
// then the second endpoint is down again. A transaction decided on
// answers from both (a lagging node's "no receipt", the other's "the nonce
// is used") would end FAILED_FINAL while mined: checkFailedNotMined.
func (r *run) laggingEndpoint(ctx context.Context) string {
	l := r.s.Lagging
	var first, own int64
	bad := rpcproxy.Fault{HTTPStatus: 502}
	for _, m := range laggingFirstMethods {
		r.s.Proxy.Before(m, r.hook(0.9, bad, &first))
	}
	for _, m := range laggingOwnMethods {
		l.Before(m, r.hook(0.5, bad, &own))
	}
	l.Lag(laggingBlocks)
	l.Heal()
	r.faults.Add(1)
	r.sleep(ctx, r.cfg.Window)
	r.endLagging()
	return fmt.Sprintf("second endpoint %d blocks behind; 502 for %d calls of %v on the first, %d of %v on the second",
		laggingBlocks, r.hits(&first), laggingFirstMethods, r.hits(&own), laggingOwnMethods)
}

// endLagging takes the second endpoint down again and lifts the 502s.
func (r *run) endLagging() {
	for _, m := range laggingFirstMethods {
		r.s.Proxy.Before(m, nil)
	}
	if l := r.s.Lagging; l != nil {
		l.FailAll(stack.LaggingDown)
		for _, m := range laggingOwnMethods {
			l.Before(m, nil)
		}
		l.Lag(0)
	}
}

// kill SIGKILLs a server and restarts it after the window.
func (r *run) kill(ctx context.Context) (string, error) {
	i := r.intn(len(r.s.ServerURLs))
	if err := r.s.Kill(i); err != nil {
		return "", err
	}
	r.faults.Add(1)
	r.sleep(ctx, r.cfg.Window)
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := r.s.Restart(rctx, i); err != nil {
		return "", err
	}
	return fmt.Sprintf("server %d SIGKILLed, restarted after %s", i, r.cfg.Window), nil
}

// leaseDuration is the servers' lease (serverEnv).
const leaseDuration = 3 * time.Second

// pause SIGSTOPs a server for longer than its lease, then SIGCONTs it.
func (r *run) pause(ctx context.Context) (string, error) {
	i := r.intn(len(r.s.ServerURLs))
	if err := r.s.Pause(i); err != nil {
		return "", err
	}
	r.faults.Add(1)
	hold := max(r.cfg.Window, 2*leaseDuration)
	r.sleep(ctx, hold)
	if err := r.s.Resume(i); err != nil {
		return "", err
	}
	return fmt.Sprintf("server %d SIGSTOPped for %s (lease %s), then SIGCONTed", i, hold, leaseDuration), nil
}

// dbRestart restarts PostgreSQL under the running servers.
func (r *run) dbRestart(ctx context.Context) (string, error) {
	start := time.Now()
	if err := r.s.RestartDatabase(ctx); err != nil {
		return "", err
	}
	r.faults.Add(1)
	took := time.Since(start)
	r.sleep(ctx, r.cfg.Window)
	return fmt.Sprintf("PostgreSQL restarted (down %s)", took.Round(10*time.Millisecond)), nil
}

// reorg replaces the last block, then, half a window later, more blocks
// than the confirmation depth (reported outcomes are reopened).
func (r *run) reorg(ctx context.Context) (string, error) {
	shallow := r.txsInLastBlocks(ctx, 1)
	if err := r.s.Reorg(1, false); err != nil {
		return "", err
	}
	r.faults.Add(1)
	r.sleep(ctx, r.cfg.Window/2)
	deep := confirmations + 1
	deepTxs := r.txsInLastBlocks(ctx, deep)
	if err := r.s.Reorg(deep, false); err != nil {
		return "1-block reorg", err
	}
	r.faults.Add(1)
	r.sleep(ctx, r.cfg.Window/2)
	return fmt.Sprintf("a 1-block reorg (%d transactions in the replaced block), then a %d-block one (%d; confirmations %d)",
		shallow, deep, deepTxs, confirmations), nil
}

// txsInLastBlocks counts the transactions in the chain's last n blocks.
func (r *run) txsInLastBlocks(ctx context.Context, n int) int {
	ec := r.s.Chain.Backend.Client()
	head, err := ec.BlockNumber(ctx)
	if err != nil {
		return -1
	}
	total := 0
	for i := 0; i < n && uint64(i) < head; i++ {
		b, err := ec.BlockByNumber(ctx, new(big.Int).SetUint64(head-uint64(i)))
		if err != nil {
			return -1
		}
		total += len(b.Transactions())
	}
	return total
}

// healAll undoes whatever fault may still be on (a soak cut short): proxy
// rules and hooks, a fee spike, stopped or killed servers.
func (r *run) healAll(ctx context.Context) {
	r.s.Proxy.Heal()
	for _, m := range append(append([]string{}, rpcErrorMethods...), rpcSlowMethods...) {
		r.s.Proxy.Before(m, nil)
	}
	r.endLagging()
	r.s.EndFeeSpike()
	for i := range r.s.ServerURLs {
		_ = r.s.Resume(i) // an error: it was not paused
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		_ = r.s.Restart(rctx, i) // an error: it was running
		cancel()
	}
}
