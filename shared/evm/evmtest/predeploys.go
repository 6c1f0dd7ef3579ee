package evmtest

import (
	"maps"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
)

// The L2 predeploys a chain of the op-stack or arbitrum kind prices its
// data fee with, at their real addresses, for a simulated chain to carry in
// its genesis (PredeployAlloc). Their formulas are simple on purpose: a
// test can tell the fee from a transaction's size alone.
var (
	// GasPriceOracleAddress is the OP Stack GasPriceOracle's address.
	GasPriceOracleAddress = common.HexToAddress("0x420000000000000000000000000000000000000F")
	// NodeInterfaceAddress is the Arbitrum NodeInterface's address.
	NodeInterfaceAddress = common.HexToAddress("0x00000000000000000000000000000000000000C8")
)

// The predeploys' storage in genesis.
var (
	// GenesisL1BaseFee is the L1 base fee both predeploys start with.
	GenesisL1BaseFee = big.NewInt(params.GWei)
	// GenesisGasPerByte is the L2 gas NodeInterface starts charging per
	// byte posted to L1.
	GenesisGasPerByte = big.NewInt(16)
)

var (
	gasPriceOracle = mustContract("GasPriceOracle")
	nodeInterface  = mustContract("NodeInterface")
)

// GasPriceOracle is an OP Stack-style GasPriceOracle: getL1Fee(bytes) is
// (16 × len(bytes) + 188) × l1BaseFee(), and setL1BaseFee(uint256) moves
// the L1 base fee.
func GasPriceOracle() *Contract { return gasPriceOracle() }

// NodeInterface is an Arbitrum-style NodeInterface:
// gasEstimateL1Component(to, contractCreation, data) answers
// ((len(data) + 140) × gasPerByte(), the block's base fee, l1BaseFee());
// setGasPerByte(uint256) and setL1BaseFee(uint256) move them.
func NodeInterface() *Contract { return nodeInterface() }

// PredeployAlloc is the genesis alloc of GasPriceOracle at
// GasPriceOracleAddress and NodeInterface at NodeInterfaceAddress, their
// runtime code and storage (GenesisL1BaseFee, GenesisGasPerByte) set as
// no constructor ran.
func PredeployAlloc() types.GenesisAlloc {
	slot := func(i int64) common.Hash { return common.BigToHash(big.NewInt(i)) }
	return types.GenesisAlloc{
		GasPriceOracleAddress: {Code: GasPriceOracle().Runtime, Balance: new(big.Int),
			Storage: map[common.Hash]common.Hash{slot(0): common.BigToHash(GenesisL1BaseFee)}},
		NodeInterfaceAddress: {Code: NodeInterface().Runtime, Balance: new(big.Int),
			Storage: map[common.Hash]common.Hash{slot(0): common.BigToHash(GenesisGasPerByte), slot(1): common.BigToHash(GenesisL1BaseFee)}},
	}
}

// InstallPredeploys adds PredeployAlloc to alloc (an edit for a world's
// genesis, say).
func InstallPredeploys(alloc types.GenesisAlloc) { maps.Copy(alloc, PredeployAlloc()) }
