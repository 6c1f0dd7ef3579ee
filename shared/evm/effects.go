package evm

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/txfence/txfence/shared/txm"
)

// Event topics of the token standards.
var (
	topicTransfer       = crypto.Keccak256Hash([]byte("Transfer(address,address,uint256)"))
	topicApproval       = crypto.Keccak256Hash([]byte("Approval(address,address,uint256)"))
	topicApprovalForAll = crypto.Keccak256Hash([]byte("ApprovalForAll(address,address,bool)"))
	topicTransferSingle = crypto.Keccak256Hash([]byte("TransferSingle(address,address,address,uint256,uint256)"))
	topicTransferBatch  = crypto.Keccak256Hash([]byte("TransferBatch(address,address,address,uint256[],uint256[])"))
)

// Addresses whose Transfer logs are native value, not a token's.
var (
	// traceTransferAddress is where eth_simulateV1 with traceTransfers
	// reports native transfers from (ERC-7528's address for ether; geth
	// internal/ethapi/logtracer.go).
	traceTransferAddress = common.HexToAddress("0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE")
	// systemTransferAddress is where the protocol itself logs native
	// transfers from Amsterdam on (EIP-7708), when eth_simulateV1 no longer
	// synthesises its own.
	systemTransferAddress = common.HexToAddress("0xfffffffffffffffffffffffffffffffffffffffe")
)

// maxBatchIDs bounds the ids one TransferBatch log may yield, so that a
// log claiming a huge array allocates nothing before it is checked.
const maxBatchIDs = 1 << 16

// DecodeEffects reads the effects of logs, in order: native transfers
// (from the pseudo-addresses above), ERC-20 Transfer and Approval (three
// topics, the amount in the data), ERC-721 Transfer and Approval (four
// topics, the token id last), ApprovalForAll, and ERC-1155 TransferSingle
// and TransferBatch (one effect per id). A log of none of these, or one
// whose topics or data do not fit its event (a wrong topic count, short
// data, arrays that do not add up), is skipped.
func DecodeEffects(logs []*types.Log) []txm.Effect {
	var out []txm.Effect
	for _, l := range logs {
		if l != nil {
			out = appendEffects(out, l)
		}
	}
	return out
}

func appendEffects(out []txm.Effect, l *types.Log) []txm.Effect {
	if len(l.Topics) == 0 {
		return out
	}
	t := l.Topics
	switch t[0] {
	case topicTransfer:
		native := l.Address == traceTransferAddress || l.Address == systemTransferAddress
		switch {
		case len(t) == 3 && len(l.Data) >= 32 && native:
			return append(out, txm.Effect{Kind: txm.EffectNative, From: topicAddress(t[1]), To: topicAddress(t[2]), Amount: word(l.Data, 0)})
		case len(t) == 3 && len(l.Data) >= 32:
			return append(out, tokenEffect(txm.EffectERC20Transfer, l, word(l.Data, 0), nil))
		case len(t) == 4 && !native:
			return append(out, tokenEffect(txm.EffectERC721Transfer, l, big.NewInt(1), t[3].Big()))
		}
	case topicApproval:
		switch {
		case len(t) == 3 && len(l.Data) >= 32:
			return append(out, tokenEffect(txm.EffectERC20Approval, l, word(l.Data, 0), nil))
		case len(t) == 4:
			return append(out, tokenEffect(txm.EffectERC721Approval, l, big.NewInt(1), t[3].Big()))
		}
	case topicApprovalForAll:
		if len(t) == 3 && len(l.Data) >= 32 {
			granted := big.NewInt(0)
			if word(l.Data, 0).Sign() != 0 {
				granted = big.NewInt(1)
			}
			return append(out, tokenEffect(txm.EffectApprovalForAll, l, granted, nil))
		}
	case topicTransferSingle:
		// TransferSingle(operator, from, to, id, value): from and to are
		// topics 2 and 3.
		if len(t) == 4 && len(l.Data) >= 64 {
			return append(out, txm.Effect{Kind: txm.EffectERC1155Transfer, Token: l.Address,
				From: topicAddress(t[2]), To: topicAddress(t[3]), Amount: word(l.Data, 32), TokenID: word(l.Data, 0)})
		}
	case topicTransferBatch:
		if len(t) != 4 {
			return out
		}
		ids, ok := uintArray(l.Data, 0)
		if !ok {
			return out
		}
		amounts, ok := uintArray(l.Data, 32)
		if !ok || len(amounts) != len(ids) {
			return out
		}
		for i := range ids {
			out = append(out, txm.Effect{Kind: txm.EffectERC1155Transfer, Token: l.Address,
				From: topicAddress(t[2]), To: topicAddress(t[3]), Amount: amounts[i], TokenID: ids[i]})
		}
	}
	return out
}

// tokenEffect is the effect of a token event whose topics 1 and 2 are from
// and to.
func tokenEffect(kind txm.EffectKind, l *types.Log, amount, id *big.Int) txm.Effect {
	return txm.Effect{Kind: kind, Token: l.Address, From: topicAddress(l.Topics[1]), To: topicAddress(l.Topics[2]), Amount: amount, TokenID: id}
}

// topicAddress is an indexed address: the topic's low 20 bytes.
func topicAddress(h common.Hash) common.Address { return common.BytesToAddress(h[12:]) }

// word is the 32-byte big-endian word at off of data; the caller checks
// that it is there.
func word(data []byte, off int) *big.Int { return new(big.Int).SetBytes(data[off : off+32]) }

// uintArray reads the ABI-encoded uint256[] whose offset is the word at
// head of data; false when the offset, the length or the elements do not
// fit in data.
func uintArray(data []byte, head int) ([]*big.Int, bool) {
	if len(data) < head+32 {
		return nil, false
	}
	off, ok := smallWord(data, head)
	if !ok || off > uint64(len(data)) || uint64(len(data))-off < 32 {
		return nil, false
	}
	n, ok := smallWord(data, int(off))
	start := off + 32
	if !ok || n > maxBatchIDs || n*32 > uint64(len(data))-start {
		return nil, false
	}
	out := make([]*big.Int, n)
	for i := range out {
		out[i] = word(data, int(start)+32*i)
	}
	return out, true
}

// smallWord is the word at off of data as a uint64; false when it does not
// fit in 32 bits, which no real offset or length needs.
func smallWord(data []byte, off int) (uint64, bool) {
	w := word(data, off)
	if w.BitLen() > 32 {
		return 0, false
	}
	return w.Uint64(), true
}
