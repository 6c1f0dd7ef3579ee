package txm

import (
	"context"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// SimMethod is how a chain's node simulated a call.
type SimMethod string

const (
	// SimSimulateV1 is eth_simulateV1 with transfer tracing: every effect
	// the call's logs show, internal native transfers included.
	SimSimulateV1 SimMethod = "simulateV1"
	// SimCallEstimate is eth_call plus eth_estimateGas, for nodes that do
	// not serve eth_simulateV1: the effects are the top-level native value
	// only.
	SimCallEstimate SimMethod = "call+estimate"
)

// SimCall is a transaction to simulate, as the caller described it.
type SimCall struct {
	From  common.Address
	To    *common.Address // nil: contract creation
	Value *big.Int        // nil: 0
	Data  []byte
	// Gas is the caller's gas limit (0: none); the estimate then checks it
	// is enough.
	Gas uint64
	// Fees the transaction will pay per gas, when the caller fixed them
	// (nil: chosen at signing): EIP-1559 or legacy, never both.
	MaxFeePerGas         *big.Int
	MaxPriorityFeePerGas *big.Int
	GasPrice             *big.Int
}

// SimResult is one call's simulation against the latest state.
type SimResult struct {
	// Method is how the node simulated it.
	Method SimMethod
	// Gas is the gas estimate, with the configured margin: the gas limit to
	// sign with. 0 when the call reverted or failed.
	Gas uint64
	// Effects are what the call moves or allows, in the order they happen;
	// none when it reverted or failed.
	Effects []Effect
	// Reverted says the call reverts; RevertData is what it reverted with
	// (nil when the node gave nothing).
	Reverted   bool
	RevertData []byte
	// Err is the node's refusal to run the call for a fault of its own
	// other than a revert: an *InsufficientFundsError, or an
	// *ExecutionError (out of gas at any limit, an invalid opcode, ...).
	Err error
}

// Simulator simulates calls against the latest state of one chain, each
// independently of the others (none sees another's state changes), in one
// batched round trip where it can. A revert or a refused call is a result
// (SimResult.Reverted, SimResult.Err), not an error: the error means the
// node could not be asked, or answered with something unusable.
type Simulator interface {
	Simulate(ctx context.Context, calls []SimCall) ([]SimResult, error)
	// SimulationMethod is the method the chain's last simulation used; ""
	// before the first.
	SimulationMethod() SimMethod
}

// CodeChecker tells which addresses hold code, so that a call without data
// to one that holds none (a plain transfer, whose effects are its value) can
// skip simulation. Answers may be cached for a short while: an account can
// gain or lose code (a contract deployed at a known address, an EIP-7702
// delegation set or cleared).
type CodeChecker interface {
	// HasCode reports, for each address in order, whether it holds code at
	// the latest block, in one batched call for the addresses not cached.
	HasCode(ctx context.Context, addrs []common.Address) ([]bool, error)
}
