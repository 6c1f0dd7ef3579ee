package submit

import (
	"context"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
)

// TestIssue4_Throughput measures, in one run, how fast one hot signer's
// transactions go from ALLOCATED to TRACKING (sign, persist, broadcast,
// mark) against how fast the node ingests pre-signed raw transactions sent
// one after another over the same HTTP JSON-RPC. It prints both and their
// ratio; it asserts only correctness, never speed.
func TestIssue4_Throughput(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	const n = 1000
	w := stacktest.NewWorld(t, 2)
	w.Cfg.Chains = []config.Chain{{ID: evmtest.ChainID, RPCURLs: []string{w.Chain.URL}}} // no proxy in the way
	nd := w.Node(t, "hot")
	signer := w.Keys[0].Address
	nd.Allocate(t, signer, n)
	ctx := context.Background()

	start := time.Now()
	for w.States(t)["ALLOCATED"] > 0 {
		require.NoError(t, handler(t, nd).Handle(ctx, stacktest.Prompt(t, signer)))
	}
	drain := time.Since(start)
	require.Equal(t, map[string]int{"TRACKING": n}, w.States(t))

	// The node's own ingestion rate: the other key, pre-signed, same transport.
	key := w.Keys[1]
	head, err := w.Chain.Backend.Client().HeaderByNumber(ctx, nil)
	require.NoError(t, err)
	tip := big.NewInt(evmtest.MinerTip)
	feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip)
	to := common.HexToAddress("0xdead")
	raws := make([]hexutil.Bytes, n)
	for i := range raws {
		tx, err := types.SignNewTx(key.Key, types.LatestSignerForChainID(big.NewInt(evmtest.ChainID)), &types.DynamicFeeTx{
			ChainID: big.NewInt(evmtest.ChainID), Nonce: uint64(i), GasTipCap: tip, GasFeeCap: feeCap, Gas: 21000, To: &to, Value: big.NewInt(1)})
		require.NoError(t, err)
		raws[i], err = tx.MarshalBinary()
		require.NoError(t, err)
	}
	rc, err := rpc.DialContext(ctx, w.Chain.URL)
	require.NoError(t, err)
	defer rc.Close()
	start = time.Now()
	for _, raw := range raws {
		var h common.Hash
		require.NoError(t, rc.CallContext(ctx, &h, "eth_sendRawTransaction", raw))
	}
	ingest := time.Since(start)

	drainRate, ingestRate := float64(n)/drain.Seconds(), float64(n)/ingest.Seconds()
	t.Logf("one hot signer, %d transactions: ALLOCATED→TRACKING %.0f tx/s; node sendRawTransaction ingestion %.0f tx/s; ratio %.2f",
		n, drainRate, ingestRate, drainRate/ingestRate)
}
