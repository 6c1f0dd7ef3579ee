package txm

import (
	"encoding/hex"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func u(n uint64) *uint64 { return &n }

// TestIssue3_NonceDecision covers every max/expiry case of the allocation
// decision: where the next nonce starts, and when the chain is asked.
func TestIssue3_NonceDecision(t *testing.T) {
	const timeout = 30 * time.Second
	cases := []struct {
		name     string
		cur      CursorState
		chain    *uint64
		wantSync bool
		want     uint64
	}{
		{"new signer, chain at zero", CursorState{}, u(0), true, 0},
		{"new signer, chain ahead", CursorState{}, u(12), true, 12},
		{"never synced cursor", CursorState{Exists: true, Next: 4}, u(2), true, 4},
		{"fresh sync, chain not asked", CursorState{Exists: true, Next: 9, Synced: true, SyncAge: time.Second}, nil, false, 9},
		{"stale sync, chain behind (unbroadcast allocations)", CursorState{Exists: true, Next: 9, Synced: true, SyncAge: time.Minute}, u(3), true, 9},
		{"stale sync, chain equal", CursorState{Exists: true, Next: 9, Synced: true, SyncAge: time.Minute}, u(9), true, 9},
		{"stale sync, chain ahead (used elsewhere)", CursorState{Exists: true, Next: 9, Synced: true, SyncAge: time.Minute}, u(20), true, 20},
		{"sync exactly at the timeout is stale", CursorState{Exists: true, Next: 1, Synced: true, SyncAge: timeout}, u(1), true, 1},
		{"sync just inside the timeout is fresh", CursorState{Exists: true, Next: 1, Synced: true, SyncAge: timeout - time.Millisecond}, nil, false, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.wantSync, tc.cur.NeedsChainSync(timeout))
			assert.Equal(t, tc.want, NextNonce(tc.cur, tc.chain))
			assert.GreaterOrEqual(t, NextNonce(tc.cur, tc.chain), tc.cur.Next, "the cursor never moves backwards")
		})
	}
}

func TestParseAddress(t *testing.T) {
	good := []string{
		"0xdAC17F958D2ee523a2206206994597C13D831ec7",
		"0xdac17f958d2ee523a2206206994597c13d831ec7",
		"0xDAC17F958D2EE523A2206206994597C13D831EC7",
	}
	for _, s := range good {
		a, err := ParseAddress(s)
		require.NoError(t, err, s)
		assert.Equal(t, "0xdac17f958d2ee523a2206206994597c13d831ec7", CanonicalAddress(a))
	}
	bad := map[string]string{
		"dac17f958d2ee523a2206206994597c13d831ec7":    "0x",
		"0xdac17f958d2ee523a2206206994597c13d831e":    "40 hex digits",
		"0xdac17f958d2ee523a2206206994597c13d831ec7a": "40 hex digits",
		"0xgac17f958d2ee523a2206206994597c13d831ec7":  "non-hex",
		"0xdAC17F958D2ee523a2206206994597C13D831Ec7":  "checksum",
	}
	for s, want := range bad {
		_, err := ParseAddress(s)
		require.Error(t, err, s)
		assert.Contains(t, err.Error(), want, s)
	}
}

func TestFingerprint(t *testing.T) {
	to := common.HexToAddress("0x01")
	base := Request{ChainID: 1, From: common.HexToAddress("0x02"), To: &to, Value: big.NewInt(5), Data: []byte{1}, GasLimit: 21000,
		Metadata: []byte(`{"b":1,"a":[1,2]}`), RequestID: "x"}
	same := base
	same.Metadata = []byte(`{ "a": [1, 2], "b": 1 }`)
	same.RequestID = "y"
	same.GasEstimate = 99999
	assert.Equal(t, base.Fingerprint(), same.Fingerprint(), "key order, spacing, request id and the estimate do not matter")
	for name, mut := range map[string]func(r *Request){
		"value":    func(r *Request) { r.Value = big.NewInt(6) },
		"to":       func(r *Request) { r.To = nil },
		"data":     func(r *Request) { r.Data = []byte{2} },
		"gas":      func(r *Request) { r.GasLimit = 0 },
		"fee":      func(r *Request) { r.MaxFeePerGas = big.NewInt(1) },
		"chain":    func(r *Request) { r.ChainID = 2 },
		"metadata": func(r *Request) { r.Metadata = []byte(`{"b":2}`) },
	} {
		r := base
		mut(&r)
		assert.NotEqual(t, base.Fingerprint(), r.Fingerprint(), name)
	}
}

func TestTransitions(t *testing.T) {
	assert.NoError(t, CheckMove(StateAllocated, StateTracking))
	assert.NoError(t, CheckMove(StateMined, StateTracking), "a reorg")
	assert.NoError(t, CheckMove(StateStuck, StateMined), "a stuck transaction that gets mined still confirms")
	assert.NoError(t, CheckMove(StateConfirmed, StateTracking), "a reorg deeper than the confirmation depth")
	assert.ErrorIs(t, CheckMove(StateConfirmed, StateMined), ErrIllegalTransition)
	assert.ErrorIs(t, CheckMove(StateAllocated, StateConfirmed), ErrIllegalTransition)
	for _, s := range States {
		assert.True(t, s.Valid())
		if s.Terminal() {
			for _, to := range States {
				assert.Equal(t, to == StateTracking, CanMove(s, to), "%s is terminal but for a deep reorg", s)
			}
		}
	}
}

// BenchmarkFingerprint: a create's fingerprint, computed for every request
// a batch allocates.
func BenchmarkFingerprint(b *testing.B) {
	to := common.HexToAddress("0xdead")
	r := &Request{ChainID: 1, From: common.HexToAddress("0xbeef"), To: &to, Value: big.NewInt(1000),
		Data: []byte{1, 2, 3}, GasLimit: 21000, MaxFeePerGas: big.NewInt(30e9), Metadata: []byte(`{"order":"o-1"}`)}
	b.ReportAllocs()
	for b.Loop() {
		_ = r.Fingerprint()
	}
}

// TestFingerprint_Stable: fingerprints are stored with each transaction and
// compared with a replay's, possibly by another release: the bytes they
// hash must not change.
func TestFingerprint_Stable(t *testing.T) {
	to := common.HexToAddress("0xdead")
	for i, c := range []struct {
		r    *Request
		want string
	}{
		{&Request{ChainID: 1, From: common.HexToAddress("0xbeef"), To: &to, Value: big.NewInt(1000), Data: []byte{1, 2, 3},
			GasLimit: 21000, MaxFeePerGas: big.NewInt(30e9), Metadata: []byte(`{"order":"o-1"}`)}, "ce6a2ba92e54e685a66daf3c6115857e36d7c9888b20e82833615c7ca274a40f"},
		{&Request{ChainID: 5, From: common.HexToAddress("0xbeef"), GasPrice: big.NewInt(7)}, "939e58283953a96af696d9cd585bdba226a04f7f8021e565d25cad5d95b99666"},
		{&Request{ChainID: 1 << 60, From: common.HexToAddress("0x01"), To: &to, Value: big.NewInt(0),
			MaxPriorityFeePerGas: big.NewInt(1)}, "28b02f68157de5194bc5b6775166c8bb499da794e457729a0ec06349dc0e3c69"},
	} {
		fp := c.r.Fingerprint()
		assert.Equal(t, c.want, hex.EncodeToString(fp[:]), "request %d", i)
		via := *c.r
		via.SendVia = "protect"
		assert.NotEqual(t, fp, via.Fingerprint(), "request %d: a route is part of what was asked", i)
	}
}
