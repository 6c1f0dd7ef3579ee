package stack

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/txfence/txfence/shared/evm/evmtest"
)

// Faults the stack injects into its real parts. JSON-RPC faults (errors,
// delays, dropped connections, swallowed broadcasts) go through Stack.Proxy
// directly.

// server returns function server i.
func (s *Stack) server(i int) (*server, error) {
	if i < 0 || i >= len(s.servers) {
		return nil, fmt.Errorf("no function server %d (there are %d)", i, len(s.servers))
	}
	return s.servers[i], nil
}

// Kill SIGKILLs function server i, as a crashed instance. Its port stays
// closed until Restart.
func (s *Stack) Kill(i int) error {
	srv, err := s.server(i)
	if err != nil {
		return err
	}
	srv.mu.Lock()
	cmd, exited, dead := srv.cmd, srv.exited, srv.dead
	srv.dead, srv.paused = true, false
	srv.mu.Unlock()
	if dead {
		return fmt.Errorf("kill: server %d is not running", i)
	}
	if err := cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill server %d: %w", i, err)
	}
	<-exited
	return nil
}

// Restart starts a killed function server i again on the same port, as a
// new instance (a new owner id), and returns once it answers.
func (s *Stack) Restart(ctx context.Context, i int) error {
	srv, err := s.server(i)
	if err != nil {
		return err
	}
	if !srv.isDead() {
		return fmt.Errorf("restart: server %d is running; Kill it first", i)
	}
	if err := s.startServer(srv); err != nil {
		return err
	}
	return WaitReady(ctx, srv.url+"/Api/healthz")
}

// Pause SIGSTOPs function server i: the process freezes mid-work, holding
// whatever leases, locks and connections it had, and requests to it hang
// until Resume, as a stalled instance (a long GC pause, a throttled CPU).
func (s *Stack) Pause(i int) error {
	return s.signal(i, syscall.SIGSTOP, true)
}

// Resume SIGCONTs a paused function server i; it carries on where it
// stopped, with its leases perhaps taken over meanwhile.
func (s *Stack) Resume(i int) error {
	return s.signal(i, syscall.SIGCONT, false)
}

func (s *Stack) signal(i int, sig syscall.Signal, pause bool) error {
	srv, err := s.server(i)
	if err != nil {
		return err
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if srv.dead {
		return fmt.Errorf("%s: server %d is not running", sig, i)
	}
	if srv.paused == pause {
		return fmt.Errorf("%s: server %d is already %s", sig, i, map[bool]string{true: "paused", false: "running"}[pause])
	}
	if err := srv.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s server %d: %w", sig, i, err)
	}
	srv.paused = pause
	return nil
}

// RestartDatabase restarts the stack's ephemeral PostgreSQL (fast shutdown,
// then a start on the same data) while the servers keep running: every
// session is cut, as in a Cloud SQL failover. It returns once the database
// accepts connections again.
func (s *Stack) RestartDatabase(ctx context.Context) error {
	if s.pg == nil {
		return errors.New("restart database: the stack uses an external database")
	}
	return s.pg.Restart(ctx)
}

// Reorg replaces the last depth blocks of the simulated chain with a longer
// branch (depth + 1 new blocks); transactions of the dropped blocks return
// to the pool unless drop is set. Transactions waiting in the pool are kept,
// and with a fault proxy no broadcast reaches the chain while it runs. A
// chain held (HoldChain) is released: blocks come again, to mine the
// returned transactions.
func (s *Stack) Reorg(depth int, drop bool) error {
	if s.Chain == nil {
		return errors.New("reorg: only the simulated chain can be reorganised")
	}
	if s.Proxy != nil {
		defer s.Proxy.Hold("eth_sendRawTransaction")()
	}
	if err := s.Chain.Reorg(depth, drop); err != nil {
		return err
	}
	s.ReleaseChain()
	return nil
}

// BaseFee returns the base fee per gas of the simulated chain's latest
// block.
func (s *Stack) BaseFee(ctx context.Context) (*big.Int, error) {
	if s.Chain == nil {
		return nil, errors.New("base fee: no simulated chain")
	}
	h, err := s.Chain.Backend.Client().HeaderByNumber(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("base fee: %w", err)
	}
	return h.BaseFee, nil
}

// Fund sends wei from the funder (an account of the simulated chain's
// genesis that txfence does not manage) to addr and waits until the
// transfer is mined, sending it again should the chain's pool lose it.
func (s *Stack) Fund(ctx context.Context, addr common.Address, wei *big.Int) error {
	if s.Chain == nil {
		return errors.New("fund: no simulated chain")
	}
	s.fundMu.Lock()
	defer s.fundMu.Unlock()
	ec := s.Chain.Backend.Client()
	nonce, err := ec.NonceAt(ctx, s.funder.Address, nil)
	if err != nil {
		return fmt.Errorf("fund: nonce: %w", err)
	}
	tx, err := s.signCall(ctx, s.funder, nonce, addr, wei, 21000, nil)
	if err != nil {
		return fmt.Errorf("fund: %w", err)
	}
	for next := time.Now(); ; {
		if time.Now().After(next) {
			_ = ec.SendTransaction(ctx, tx) // a resend is refused as known, harmlessly
			next = time.Now().Add(3 * time.Second)
		}
		if r, err := ec.TransactionReceipt(ctx, tx.Hash()); err == nil {
			if r.Status != types.ReceiptStatusSuccessful {
				return fmt.Errorf("fund: transfer %s failed", tx.Hash())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fund: transfer %s not mined: %w", tx.Hash(), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// signCall signs a call from key at nonce with a tip of twice the node's
// suggestion (at least 2 wei) and a fee cap that survives a few blocks of
// rising base fee. A nil tip takes that default.
func (s *Stack) signCall(ctx context.Context, key evmtest.DevKey, nonce uint64, to common.Address, value *big.Int, gas uint64, tip *big.Int) (*types.Transaction, error) {
	ec := s.Chain.Backend.Client()
	if tip == nil {
		suggested, err := ec.SuggestGasTipCap(ctx)
		if err != nil {
			return nil, fmt.Errorf("suggest tip: %w", err)
		}
		tip = new(big.Int).Mul(suggested, big.NewInt(2))
		if tip.Cmp(big.NewInt(2)) < 0 {
			tip = big.NewInt(2)
		}
	}
	base, err := s.BaseFee(ctx)
	if err != nil {
		return nil, err
	}
	feeCap := new(big.Int).Add(new(big.Int).Mul(base, big.NewInt(3)), tip)
	chainID := big.NewInt(evmtest.ChainID)
	return types.SignNewTx(key.Key, types.LatestSignerForChainID(chainID), &types.DynamicFeeTx{
		ChainID: chainID, Nonce: nonce, GasTipCap: tip, GasFeeCap: feeCap, Gas: gas, To: &to, Value: value,
	})
}

// FeeSpike starts filling each of the next n blocks of the simulated chain
// past its gas target, and returns at once. A spammer account that txfence
// does not manage calls evmtest.GasBurner with 9/10 of the block gas limit
// and a tip above the node's suggestion, so its call goes first and each
// block is 90% full: the base fee rises by 10% (at least 1 wei) per block,
// and soon above the fee caps that earlier attempts offered. The spike ends
// after n blocks or at EndFeeSpike; the base fee then falls back by up to
// 12.5% per block. One spike runs at a time.
func (s *Stack) FeeSpike(n int) error {
	if s.Chain == nil {
		return errors.New("fee spike: no simulated chain")
	}
	ctx := context.Background()
	head, err := s.Chain.Backend.Client().HeaderByNumber(ctx, nil)
	if err != nil {
		return fmt.Errorf("fee spike: %w", err)
	}
	burn := head.GasLimit / 10 * 9
	if burn > 1<<24 {
		return fmt.Errorf("fee spike: 9/10 of the block gas limit (%d) is above the per-transaction cap; set Options.BlockGasLimit", head.GasLimit)
	}
	s.spike.Lock()
	defer s.spike.Unlock()
	if s.spike.stop != nil {
		select {
		case <-s.spike.done:
		default:
			return errors.New("fee spike: one is running")
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	s.spike.stop, s.spike.done = stop, done
	go func() {
		defer close(done)
		s.spam(ctx, n, burn, stop)
	}()
	return nil
}

// spam keeps up to two burner calls waiting for the next blocks until n of
// them are mined or stop is closed. It works from the chain's nonces, so a
// call the pool loses is simply sent again.
func (s *Stack) spam(ctx context.Context, n int, burn uint64, stop chan struct{}) {
	ec := s.Chain.Backend.Client()
	from := s.spammer.Address
	first, err := ec.NonceAt(ctx, from, nil)
	if err != nil {
		s.opts.Log.Warn("fee spike: nonce", "error", err)
		return
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		mined, err1 := ec.NonceAt(ctx, from, nil)
		pending, err2 := ec.PendingNonceAt(ctx, from)
		if err := errors.Join(err1, err2); err != nil {
			continue
		}
		if mined-first >= uint64(n) {
			return
		}
		if pending-mined >= 2 || pending-first >= uint64(n) {
			continue
		}
		tx, err := s.signCall(ctx, s.spammer, pending, evmtest.GasBurner, new(big.Int), burn, nil)
		if err == nil {
			err = ec.SendTransaction(ctx, tx)
		}
		if err != nil {
			s.opts.Log.Debug("fee spike: send", "error", err)
		}
	}
}

// EndFeeSpike stops a running fee spike and waits for it; calls already
// waiting in the pool (at most two) still fill their blocks.
func (s *Stack) EndFeeSpike() {
	s.spike.Lock()
	defer s.spike.Unlock()
	if s.spike.stop == nil {
		return
	}
	select {
	case <-s.spike.stop:
	default:
		close(s.spike.stop)
	}
	<-s.spike.done
}

// FeeSpikeRunning reports whether a fee spike is still filling blocks.
func (s *Stack) FeeSpikeRunning() bool {
	s.spike.Lock()
	defer s.spike.Unlock()
	if s.spike.done == nil {
		return false
	}
	select {
	case <-s.spike.done:
		return false
	default:
		return true
	}
}
