package txm

import "bytes"

// Intrinsic gas under Ethereum mainnet's current rules (Prague/Osaka). The
// numbers are go-ethereum's params of the same meaning; gas_test.go checks
// IntrinsicGas against go-ethereum's own functions.
const (
	txGas                 = 21000 // every transaction, before its data
	txGasContractCreation = 53000 // a contract creation, before its data
	txDataZeroGas         = 4     // per zero byte of calldata
	txDataNonZeroGas      = 16    // per non-zero byte of calldata (EIP-2028)
	initCodeWordGas       = 2     // per 32-byte word of init code (EIP-3860)
	txTokenPerNonZeroByte = 4     // a non-zero byte is 4 tokens, a zero byte 1 (EIP-7623)
	txCostFloorPerToken   = 10    // floor gas per token (EIP-7623)
)

// IntrinsicGas is the least gas limit a transaction with this data can
// have: the intrinsic gas (21000, or 53000 for a contract creation; 4 gas
// per zero and 16 per non-zero byte of data; 2 per 32-byte word of init
// code) or, when higher, EIP-7623's calldata floor (21000 + 10 per token,
// a zero byte being 1 token and a non-zero byte 4). Access lists and
// authorizations, which txfence does not send, are not counted. A node
// refuses a transaction whose gas limit is below it.
func IntrinsicGas(data []byte, contractCreation bool) uint64 {
	n := uint64(len(data))
	zero := uint64(bytes.Count(data, []byte{0}))
	nonZero := n - zero

	gas := uint64(txGas)
	if contractCreation {
		gas = txGasContractCreation + (n+31)/32*initCodeWordGas
	}
	gas += zero*txDataZeroGas + nonZero*txDataNonZeroGas

	floor := txGas + (zero+nonZero*txTokenPerNonZeroByte)*txCostFloorPerToken
	return max(gas, floor)
}
