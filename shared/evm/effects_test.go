package evm

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/txm"
)

var (
	effToken = common.HexToAddress("0x00000000000000000000000000000000000070c0")
	effFrom  = common.HexToAddress("0x000000000000000000000000000000000000f00d")
	effTo    = common.HexToAddress("0x000000000000000000000000000000000000beef")
	effOp    = common.HexToAddress("0x0000000000000000000000000000000000000abc")
)

func addrTopic(a common.Address) common.Hash { return common.BytesToHash(a.Bytes()) }

func u256(n int64) []byte { return common.BigToHash(big.NewInt(n)).Bytes() }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// batchData is the ABI encoding of (uint256[] ids, uint256[] values).
func batchData(ids, values []int64) []byte {
	words := [][]byte{u256(64), u256(int64(64 + 32 + 32*len(ids))), u256(int64(len(ids)))}
	for _, id := range ids {
		words = append(words, u256(id))
	}
	words = append(words, u256(int64(len(values))))
	for _, v := range values {
		words = append(words, u256(v))
	}
	return cat(words...)
}

func TestIssue47_DecodeEffects(t *testing.T) {
	t.Parallel()
	maxUint := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	tests := []struct {
		name string
		log  types.Log
		want []txm.Effect
	}{
		{"erc20 transfer", types.Log{Address: effToken, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo)}, Data: u256(1000)},
			[]txm.Effect{{Kind: txm.EffectERC20Transfer, Token: effToken, From: effFrom, To: effTo, Amount: big.NewInt(1000)}}},
		{"erc20 approval of the maximum", types.Log{Address: effToken, Topics: []common.Hash{topicApproval, addrTopic(effFrom), addrTopic(effOp)}, Data: maxUint.FillBytes(make([]byte, 32))},
			[]txm.Effect{{Kind: txm.EffectERC20Approval, Token: effToken, From: effFrom, To: effOp, Amount: maxUint}}},
		{"erc721 transfer", types.Log{Address: effToken, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo), common.BigToHash(big.NewInt(42))}},
			[]txm.Effect{{Kind: txm.EffectERC721Transfer, Token: effToken, From: effFrom, To: effTo, Amount: big.NewInt(1), TokenID: big.NewInt(42)}}},
		{"erc721 approval", types.Log{Address: effToken, Topics: []common.Hash{topicApproval, addrTopic(effFrom), addrTopic(effOp), common.BigToHash(big.NewInt(7))}},
			[]txm.Effect{{Kind: txm.EffectERC721Approval, Token: effToken, From: effFrom, To: effOp, Amount: big.NewInt(1), TokenID: big.NewInt(7)}}},
		{"approval for all", types.Log{Address: effToken, Topics: []common.Hash{topicApprovalForAll, addrTopic(effFrom), addrTopic(effOp)}, Data: u256(1)},
			[]txm.Effect{{Kind: txm.EffectApprovalForAll, Token: effToken, From: effFrom, To: effOp, Amount: big.NewInt(1)}}},
		{"approval for all revoked", types.Log{Address: effToken, Topics: []common.Hash{topicApprovalForAll, addrTopic(effFrom), addrTopic(effOp)}, Data: u256(0)},
			[]txm.Effect{{Kind: txm.EffectApprovalForAll, Token: effToken, From: effFrom, To: effOp, Amount: big.NewInt(0)}}},
		{"erc1155 single", types.Log{Address: effToken, Topics: []common.Hash{topicTransferSingle, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)}, Data: cat(u256(5), u256(300))},
			[]txm.Effect{{Kind: txm.EffectERC1155Transfer, Token: effToken, From: effFrom, To: effTo, Amount: big.NewInt(300), TokenID: big.NewInt(5)}}},
		{"erc1155 batch", types.Log{Address: effToken, Topics: []common.Hash{topicTransferBatch, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)}, Data: batchData([]int64{1, 2}, []int64{10, 20})},
			[]txm.Effect{
				{Kind: txm.EffectERC1155Transfer, Token: effToken, From: effFrom, To: effTo, Amount: big.NewInt(10), TokenID: big.NewInt(1)},
				{Kind: txm.EffectERC1155Transfer, Token: effToken, From: effFrom, To: effTo, Amount: big.NewInt(20), TokenID: big.NewInt(2)},
			}},
		{"erc1155 empty batch", types.Log{Address: effToken, Topics: []common.Hash{topicTransferBatch, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)}, Data: batchData(nil, nil)}, nil},
		{"native from traceTransfers", types.Log{Address: traceTransferAddress, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo)}, Data: u256(9)},
			[]txm.Effect{{Kind: txm.EffectNative, From: effFrom, To: effTo, Amount: big.NewInt(9)}}},
		{"native from EIP-7708", types.Log{Address: systemTransferAddress, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo)}, Data: u256(9)},
			[]txm.Effect{{Kind: txm.EffectNative, From: effFrom, To: effTo, Amount: big.NewInt(9)}}},

		// Malformed or foreign logs are skipped.
		{"no topics", types.Log{Address: effToken, Data: u256(1)}, nil},
		{"other event", types.Log{Address: effToken, Topics: []common.Hash{common.HexToHash("0x01"), addrTopic(effFrom), addrTopic(effTo)}, Data: u256(1)}, nil},
		{"transfer with two topics", types.Log{Address: effToken, Topics: []common.Hash{topicTransfer, addrTopic(effFrom)}, Data: u256(1)}, nil},
		{"transfer with five topics", types.Log{Address: effToken, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo), {}, {}}}, nil},
		{"erc20 transfer with short data", types.Log{Address: effToken, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo)}, Data: u256(1)[:31]}, nil},
		{"erc20 approval without data", types.Log{Address: effToken, Topics: []common.Hash{topicApproval, addrTopic(effFrom), addrTopic(effOp)}}, nil},
		{"native with a token id", types.Log{Address: traceTransferAddress, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo), {}}}, nil},
		{"native with short data", types.Log{Address: traceTransferAddress, Topics: []common.Hash{topicTransfer, addrTopic(effFrom), addrTopic(effTo)}, Data: []byte{1}}, nil},
		{"erc1155 single with short data", types.Log{Address: effToken, Topics: []common.Hash{topicTransferSingle, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)}, Data: u256(5)}, nil},
		{"erc1155 single with three topics", types.Log{Address: effToken, Topics: []common.Hash{topicTransferSingle, addrTopic(effFrom), addrTopic(effTo)}, Data: cat(u256(5), u256(1))}, nil},
		{"erc1155 batch of unequal arrays", types.Log{Address: effToken, Topics: []common.Hash{topicTransferBatch, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)}, Data: batchData([]int64{1, 2}, []int64{10})}, nil},
		{"erc1155 batch cut short", types.Log{Address: effToken, Topics: []common.Hash{topicTransferBatch, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)}, Data: batchData([]int64{1, 2}, []int64{10, 20})[:200]}, nil},
		{"erc1155 batch with a huge length", types.Log{Address: effToken, Topics: []common.Hash{topicTransferBatch, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)},
			Data: cat(u256(64), u256(96), common.MaxHash.Bytes())}, nil},
		{"erc1155 batch with an offset past the end", types.Log{Address: effToken, Topics: []common.Hash{topicTransferBatch, addrTopic(effOp), addrTopic(effFrom), addrTopic(effTo)},
			Data: cat(u256(1<<20), u256(64), u256(0))}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.log
			require.Equal(t, tt.want, DecodeEffects([]*types.Log{&l}))
		})
	}

	// Several logs keep their order; nil logs are skipped.
	logs := []*types.Log{&tests[0].log, nil, &tests[9].log, &tests[2].log}
	got := DecodeEffects(logs)
	require.Len(t, got, 3)
	require.Equal(t, []txm.EffectKind{txm.EffectERC20Transfer, txm.EffectNative, txm.EffectERC721Transfer},
		[]txm.EffectKind{got[0].Kind, got[1].Kind, got[2].Kind})
}

// FuzzDecodeEffects: DecodeEffects never panics on any log, and every
// effect it returns is whole: a known kind, an amount, and a token id
// exactly for the kinds that have one.
func FuzzDecodeEffects(f *testing.F) {
	f.Add(effToken.Bytes(), uint8(3), topicTransfer.Bytes(), u256(1))
	f.Add(effToken.Bytes(), uint8(4), topicTransfer.Bytes(), []byte{})
	f.Add(effToken.Bytes(), uint8(3), topicApproval.Bytes(), u256(1)[:20])
	f.Add(effToken.Bytes(), uint8(4), topicTransferSingle.Bytes(), cat(u256(1), u256(2)))
	f.Add(effToken.Bytes(), uint8(4), topicTransferBatch.Bytes(), batchData([]int64{1, 2, 3}, []int64{4, 5, 6}))
	f.Add(effToken.Bytes(), uint8(4), topicTransferBatch.Bytes(), cat(u256(64), u256(96), common.MaxHash.Bytes()))
	f.Add(traceTransferAddress.Bytes(), uint8(3), topicTransfer.Bytes(), u256(5))
	f.Add(effToken.Bytes(), uint8(3), topicApprovalForAll.Bytes(), u256(1))
	f.Fuzz(func(t *testing.T, addr []byte, nTopics uint8, topic0 []byte, data []byte) {
		topics := make([]common.Hash, int(nTopics)%6)
		if len(topics) > 0 {
			topics[0] = common.BytesToHash(topic0)
			for i := 1; i < len(topics); i++ {
				topics[i] = common.BytesToHash(data[min(len(data), i):min(len(data), i+32)])
			}
		}
		l := &types.Log{Address: common.BytesToAddress(addr), Topics: topics, Data: data}
		for _, e := range DecodeEffects([]*types.Log{l}) {
			if !e.Kind.Valid() || e.Amount == nil || e.Amount.Sign() < 0 {
				t.Fatalf("effect %+v from %+v", e, l)
			}
			hasID := e.Kind == txm.EffectERC721Transfer || e.Kind == txm.EffectERC721Approval || e.Kind == txm.EffectERC1155Transfer
			if hasID != (e.TokenID != nil) {
				t.Fatalf("effect %+v: token id presence wrong", e)
			}
			if e.Kind != txm.EffectNative && e.Token != l.Address {
				t.Fatalf("effect %+v: token is not the log's address", e)
			}
			if _, err := e.MarshalJSON(); err != nil {
				t.Fatalf("effect %+v does not encode: %v", e, err)
			}
		}
	})
}
