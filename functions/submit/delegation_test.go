package submit

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue48_DelegatedSigner: a signer whose account carries an EIP-7702
// delegation (code 0xef0100 ++ address, in genesis; the simulated chain runs
// Prague) gets at most one transaction in flight: five transfers created at
// once are broadcast one by one, each only once the one before is mined,
// with no refusal recorded as a failure, and all confirm with contiguous
// nonces, one block after another. The signer status says delegated.
func TestIssue48_DelegatedSigner(t *testing.T) {
	t.Parallel()
	signer := evmtest.DevKeys(1)[0].Address
	delegate := common.HexToAddress("0x000000000000000000000000000000000000bEEF")
	w := stacktest.NewWorldWithAlloc(t, 1, func(alloc types.GenesisAlloc) {
		acct := alloc[signer]
		acct.Code = append(append([]byte{}, txm.DelegationDesignator...), delegate.Bytes()...)
		alloc[signer] = acct
	})
	require.Equal(t, signer, w.Keys[0].Address)
	n := w.Node(t, "n0")

	var sent inFlightAtSend
	sent.watch(w, signer)
	ids := n.Allocate(t, signer, 5)

	// Sample the transactions while they go: how many are TRACKING at once,
	// and whether any failure was recorded (a confirmation clears it).
	ctx, cancel := context.WithCancel(context.Background())
	var most, failures int
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			var tracking, failing int
			if w.DB.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'TRACKING'), coalesce(max(failures), 0)
				FROM managed_tx WHERE signer = $1`, txm.CanonicalAddress(signer)).Scan(&tracking, &failing) == nil {
				most, failures = max(most, tracking), max(failures, failing)
			}
			// sleep: the sampling interval; what is sampled is a count over time, no condition to await
			time.Sleep(5 * time.Millisecond)
		}
	}()
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{BlockEvery: 150 * time.Millisecond})
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 60*time.Second)
	}
	stop()
	cancel()
	<-sampled

	sent.mu.Lock()
	assert.LessOrEqual(t, sent.most, uint64(1), "at most one of the signer's transactions was in flight at the node when one was sent")
	assert.GreaterOrEqual(t, sent.sends, 5)
	sent.mu.Unlock()
	assert.LessOrEqual(t, most, 1, "at most one TRACKING at a time")
	assert.Zero(t, failures, "no broadcast was recorded as the transaction's failure")

	// Contiguous nonces, each mined in a later block than the one before.
	rows, err := w.DB.Pool.Query(context.Background(), `SELECT nonce, receipt_block_number FROM managed_tx WHERE signer = $1 ORDER BY nonce`,
		txm.CanonicalAddress(signer))
	require.NoError(t, err)
	var nonces, blocks []int64
	for rows.Next() {
		var nonce, block int64
		require.NoError(t, rows.Scan(&nonce, &block))
		nonces, blocks = append(nonces, nonce), append(blocks, block)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, []int64{0, 1, 2, 3, 4}, nonces)
	for i := 1; i < len(blocks); i++ {
		assert.Greater(t, blocks[i], blocks[i-1], "nonce %d mined after nonce %d, one by one", nonces[i], nonces[i-1])
	}

	// The gauge the alert reads says it.
	g, ok := n.Metrics.Gauge("delegated_signers", "chain_id", "1337", "signer", txm.CanonicalAddress(signer))
	assert.True(t, ok && g == 1, "delegated_signers is 1 for the signer (%v, %v)", g, ok)

	// The signer status says it.
	resp, err := http.Get(n.APIURL + "/v1/signers/" + txm.CanonicalAddress(signer))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var status struct {
		Delegated *bool `json:"delegated"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&status))
	require.NotNil(t, status.Delegated, "the signer status says whether the signer is delegated")
	assert.True(t, *status.Delegated)
}

// TestIssue48_InFlightRefusal: a node's refusal "in-flight transaction
// limit reached for delegated accounts" (here from a node that treats the
// signer so while its code read says nothing: a delegation set since, or
// pending) is not the transaction's failure: it waits allocated, the
// signer's in-flight limit drops to the delegated one at once, and every
// transaction confirms in nonce order, the later ones sent one at a time.
func TestIssue48_InFlightRefusal(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1)
	signer := w.Keys[0].Address
	n := w.Node(t, "n0")

	// The node refuses a transaction of the signer while another of its
	// transactions is unmined, as geth does for a delegated sender.
	var mu sync.Mutex
	var refused, accepted int
	w.Proxy.Before("eth_sendRawTransaction", func(params json.RawMessage) *rpcproxy.Fault {
		var raw []hexutil.Bytes
		var tx types.Transaction
		if json.Unmarshal(params, &raw) != nil || len(raw) != 1 || tx.UnmarshalBinary(raw[0]) != nil {
			return nil
		}
		latest, err := w.Chain.Backend.Client().NonceAt(context.Background(), signer, nil)
		if err != nil {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if tx.Nonce() > latest {
			refused++
			return &rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "in-flight transaction limit reached for delegated accounts"}}
		}
		accepted++
		return nil
	})
	ids := n.Allocate(t, signer, 4)

	ctx, cancel := context.WithCancel(context.Background())
	var failures int
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			var failing int
			if w.DB.Pool.QueryRow(ctx, `SELECT coalesce(max(failures), 0) FROM managed_tx WHERE signer = $1`,
				txm.CanonicalAddress(signer)).Scan(&failing) == nil {
				failures = max(failures, failing)
			}
			// sleep: the sampling interval; what is sampled is a count over time, no condition to await
			time.Sleep(5 * time.Millisecond)
		}
	}()
	stop := w.Run(t, []*stacktest.Node{n}, stacktest.RunOptions{BlockEvery: 150 * time.Millisecond})
	for _, id := range ids {
		w.WaitState(t, id, txm.StateConfirmed, 60*time.Second)
	}
	stop()
	cancel()
	<-sampled

	mu.Lock()
	defer mu.Unlock()
	assert.Positive(t, refused, "the node refused some broadcasts")
	assert.LessOrEqual(t, refused, 3, "only the first batch was refused: then the limit was the delegated one")
	assert.Zero(t, failures, "a refusal for the delegated limit is not the transaction's failure")
	g, ok := n.Metrics.Gauge("delegated_signers", "chain_id", "1337", "signer", txm.CanonicalAddress(signer))
	assert.True(t, ok && g == 1, "delegated_signers is 1 for the signer (%v, %v)", g, ok)
}

// inFlightAtSend records, for every broadcast of signer's transactions, how
// many of its nonces were unmined at the node counting the one being sent:
// a nonce above the node's latest nonce means those below it were still in
// flight.
type inFlightAtSend struct {
	mu    sync.Mutex
	most  uint64
	sends int
}

func (r *inFlightAtSend) watch(w *stacktest.World, signer common.Address) {
	w.Proxy.Before("eth_sendRawTransaction", func(params json.RawMessage) *rpcproxy.Fault {
		var raw []hexutil.Bytes
		var tx types.Transaction
		if json.Unmarshal(params, &raw) != nil || len(raw) != 1 || tx.UnmarshalBinary(raw[0]) != nil {
			return nil
		}
		latest, err := w.Chain.Backend.Client().NonceAt(context.Background(), signer, nil)
		if err != nil {
			return nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.sends++
		if tx.Nonce() >= latest {
			r.most = max(r.most, tx.Nonce()-latest+1)
		}
		return nil
	})
}
