package webhook

import (
	"encoding/json"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

const (
	testSecret = "whsec-test-0123456789"
	// hookPath is where test endpoints are mounted; its query carries a key,
	// as real webhook URLs sometimes do. Neither may appear in an error.
	hookPath  = "/hooks/txfence-private-path"
	hookQuery = "key=url-key-do-not-print"
)

// stuckTx is a STUCK transaction with every field set.
func stuckTx() txm.StuckTx {
	to := common.HexToAddress("0x00000000000000000000000000000000000000b0")
	return txm.StuckTx{
		TxID:      "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		ChainID:   11155111,
		Signer:    common.HexToAddress("0x00000000000000000000000000000000000000a1"),
		Nonce:     42,
		To:        &to,
		Value:     big.NewInt(1_000_000_000_000_000_000),
		RequestID: "order-7",
		SubState:  txm.SubStateFeeCapReached,
		LastError: "replacement transaction underpriced",
		Attempts:  3,
		LatestFees: txm.Fees{
			MaxFeePerGas:         big.NewInt(30_000_000_000),
			MaxPriorityFeePerGas: big.NewInt(2_000_000_000),
		},
		BaseFee:     big.NewInt(41_000_000_000),
		Failures:    5,
		CreatedAt:   time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("CET", 3600)),
		StuckSince:  time.Date(2025, 1, 2, 2, 34, 5, 123_000_000, time.UTC),
		ChainNonce:  41,
		FeeCapsLeft: false,
	}
}

// TestIssue10_WebhookWireFormat pins the request body: receivers depend on
// these names and spellings.
func TestIssue10_WebhookWireFormat(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(newRequest("D1", stuckTx()))
	require.NoError(t, err)
	assert.JSONEq(t, `{
		"deliveryId": "D1",
		"txId": "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
		"chainId": 11155111,
		"signer": "0x00000000000000000000000000000000000000A1",
		"nonce": 42,
		"to": "0x00000000000000000000000000000000000000B0",
		"value": "1000000000000000000",
		"requestId": "order-7",
		"subState": "fee_cap_reached",
		"lastError": "replacement transaction underpriced",
		"attempts": 3,
		"latestFees": {"maxFeePerGas": "30000000000", "maxPriorityFeePerGas": "2000000000"},
		"baseFee": "41000000000",
		"failures": 5,
		"createdAt": "2025-01-02T02:04:05Z",
		"stuckSince": "2025-01-02T02:34:05.123Z",
		"chainNonce": 41,
		"feeCapsLeft": false
	}`, string(b))

	// A legacy contract creation with no attempt yet and no known base fee.
	bare := txm.StuckTx{TxID: "t", ChainID: 1, LatestFees: txm.Fees{GasPrice: big.NewInt(7)}}
	b, err = json.Marshal(newRequest("D2", bare))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.NotContains(t, m, "to")
	assert.NotContains(t, m, "baseFee")
	assert.Equal(t, "0", m["value"])
	assert.Equal(t, map[string]any{"gasPrice": "7"}, m["latestFees"])
}
