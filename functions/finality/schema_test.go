package finality

import (
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/testsupport/eventschema"
	"github.com/txfence/txfence/shared/txm"
)

// TestIssue49_OutcomeMessagesMatchSchema: every message the stack publishes
// on the completion topic (pstest) validates against both schemas of
// schemas/: the JSON Schema and the proto, as Pub/Sub would with the
// topic's JSON encoding. The run publishes each kind of outcome: a
// confirmed transfer, a call that reverts on chain (TxFailed), a
// transaction reported STUCK that is then mined (TxStuck, then TxConfirmed
// with newFork); every message the topic carries is checked, whatever its
// type, so the lifecycle events are too when the deployment publishes them.
func TestIssue49_OutcomeMessagesMatchSchema(t *testing.T) {
	t.Parallel()
	w := stacktest.NewWorld(t, 1, func(c *config.Config) { c.StaleReceiptTimeout = 100 * time.Millisecond }).WithPubSub(t)
	n := w.Node(t, "n0")
	signer := w.Keys[0].Address
	chain := stacktest.ChainID().Uint64()

	// A confirmed transfer and a call that reverts on chain (nonce 0 is
	// the reverting contract's deployment, outside txfence).
	contract := w.DeployReverter(t)
	transfer := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(1))).ID
	reverted := n.AllocateRequestsAs(t, w.Advisory(t), 1, func(int) *txm.Request {
		return &txm.Request{ChainID: chain, From: signer, To: &contract, Data: []byte{1, 2, 3, 4}, GasLimit: 60_000}
	})[0]
	broadcastAndMine(t, w, n, signer, 3)
	w.Mine(int(w.Cfg.Confirmations))
	_, err := n.Finality.Pass(ctx)
	require.NoError(t, err)
	w.WaitState(t, transfer, txm.StateConfirmed, 10*time.Second)
	w.WaitState(t, reverted, txm.StateFailedFinal, 10*time.Second)

	// A provider that takes the transaction but answers with an error that
	// reads as deterministic: txfence reports STUCK, the chain mines it,
	// and the finality sweep reports it again, CONFIRMED with newFork.
	stuck := n.CreateTx(t, stacktest.Transfer(signer, big.NewInt(2))).ID
	w.Proxy.Before("eth_sendRawTransaction", func(params json.RawMessage) *rpcproxy.Fault {
		var raw []hexutil.Bytes
		var tx types.Transaction
		if json.Unmarshal(params, &raw) == nil && len(raw) == 1 && tx.UnmarshalBinary(raw[0]) == nil {
			_ = w.Chain.Backend.Client().SendTransaction(ctx, &tx)
		}
		return &rpcproxy.Fault{RPCError: &rpcproxy.RPCError{Code: -32000, Message: "insufficient funds for gas * price + value"}}
	})
	_, err = n.Drain.Execute(ctx, chain, signer)
	require.NoError(t, err)
	w.WaitState(t, stuck, txm.StateStuck, 10*time.Second)
	w.Proxy.Before("eth_sendRawTransaction", nil)
	w.MineAll(t, signer, 4)
	stacktest.WaitFor(t, "the stuck transaction mined", func() bool {
		_, err := n.Finality.Pass(ctx)
		require.NoError(t, err)
		s, _ := w.TxState(t, stuck)
		return s == string(txm.StateMined)
	})
	w.Mine(int(w.Cfg.Confirmations))
	_, err = n.Finality.Pass(ctx)
	require.NoError(t, err)
	w.WaitState(t, stuck, txm.StateConfirmed, 10*time.Second)

	// Every published message, whatever its type.
	msgs := pullCompletions(t, w, 4)
	require.GreaterOrEqual(t, len(msgs), 4, "TxConfirmed, TxFailed, TxStuck and TxConfirmed again at least")
	types := map[string]int{}
	for _, m := range msgs {
		assert.NoError(t, eventschema.ValidateJSON(m.Data), "the JSON Schema accepts %s", m.Data)
		assert.NoError(t, eventschema.ValidateProto(m.Data), "the proto accepts %s (Pub/Sub would publish it)", m.Data)
		types[eventschema.Type(m.Data)]++
	}
	assert.Equal(t, 2, types["TxConfirmed"], "the transfer and the stuck one, each confirmed")
	assert.Equal(t, 1, types["TxFailed"], "the reverted call")
	assert.Equal(t, 1, types["TxStuck"])
}
