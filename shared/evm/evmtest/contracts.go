package evmtest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/accounts/abi"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

// The test contracts: Solidity sources in contracts/, compiled by make
// contracts with the pinned solc-js into contracts/artifacts/<Name>.json (ABI,
// creation and runtime bytecode), which are committed and embedded here.
//
//go:embed contracts/artifacts/*.json
var artifacts embed.FS

// Contract is a compiled test contract.
type Contract struct {
	Name     string
	ABI      abi.ABI
	Bytecode []byte // creation code, without constructor arguments
	Runtime  []byte // the code a deployment leaves at its address (for a genesis alloc)
}

// artifact is the JSON compile.js writes.
type artifact struct {
	ContractName string          `json:"contractName"`
	ABI          json.RawMessage `json:"abi"`
	Bytecode     hexutil.Bytes   `json:"bytecode"`
	Deployed     hexutil.Bytes   `json:"deployedBytecode"`
}

// LoadContract reads the embedded artefact of the contract named name
// (TestERC20, TestERC721, TestERC1155, Reverter, Forwarder, GasPriceOracle,
// NodeInterface).
func LoadContract(name string) (*Contract, error) {
	raw, err := artifacts.ReadFile("contracts/artifacts/" + name + ".json")
	if err != nil {
		return nil, fmt.Errorf("load contract %s: %w", name, err)
	}
	var a artifact
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("load contract %s: %w", name, err)
	}
	parsed, err := abi.JSON(bytes.NewReader(a.ABI))
	if err != nil {
		return nil, fmt.Errorf("load contract %s: abi: %w", name, err)
	}
	if len(a.Bytecode) == 0 || len(a.Deployed) == 0 {
		return nil, fmt.Errorf("load contract %s: no bytecode", name)
	}
	return &Contract{Name: a.ContractName, ABI: parsed, Bytecode: a.Bytecode, Runtime: a.Deployed}, nil
}

// mustContract returns a getter of the named contract; the artefacts are
// committed and TestIssue47_ContractsCurrent keeps them loadable, so a
// failure is a broken tree.
func mustContract(name string) func() *Contract {
	return sync.OnceValue(func() *Contract {
		c, err := LoadContract(name)
		if err != nil {
			panic("evmtest: " + err.Error())
		}
		return c
	})
}

var (
	erc20     = mustContract("TestERC20")
	erc721    = mustContract("TestERC721")
	erc1155   = mustContract("TestERC1155")
	reverter  = mustContract("Reverter")
	forwarder = mustContract("Forwarder")
)

// ERC20 is TestERC20: a standard ERC-20 (18 decimals) with an open mint(to,
// value); its constructor is (name, symbol, holder, supply) and mints supply
// to holder unless holder is the zero address. An allowance of the maximum
// uint256 is unlimited.
func ERC20() *Contract { return erc20() }

// ERC721 is TestERC721: a standard ERC-721 with an open mint(to, tokenId);
// safeTransferFrom checks onERC721Received on contracts.
func ERC721() *Contract { return erc721() }

// ERC1155 is TestERC1155: a standard ERC-1155 with an open mint(to, id,
// value, data) that emits TransferSingle from the zero address.
func ERC1155() *Contract { return erc1155() }

// Reverter reverts on every call, each function in its own way:
// failWithReason() with Error(string), failWithPanic(0) with Panic(0x12),
// failWithCustom(need) with InsufficientBalance(address who, uint256 need,
// uint256 have), failWithoutData() with no data.
func Reverter() *Contract { return reverter() }

// Forwarder moves native value on with internal calls: forward(to) sends
// msg.value to to, split(a, b) half to a and the rest to b, each emitting
// Forwarded(to, value).
func Forwarder() *Contract { return forwarder() }

// Pack is the calldata of a call of method with args.
func (c *Contract) Pack(method string, args ...any) ([]byte, error) {
	data, err := c.ABI.Pack(method, args...)
	if err != nil {
		return nil, fmt.Errorf("pack %s.%s: %w", c.Name, method, err)
	}
	return data, nil
}

// DeployData is the creation code with the constructor's args appended.
func (c *Contract) DeployData(args ...any) ([]byte, error) {
	packed, err := c.ABI.Pack("", args...)
	if err != nil {
		return nil, fmt.Errorf("pack %s constructor: %w", c.Name, err)
	}
	return append(bytes.Clone(c.Bytecode), packed...), nil
}

// Deploy creates con with the constructor's args from key, commits a block
// and returns the new contract's address once its receipt says it succeeded.
func (c *Chain) Deploy(ctx context.Context, key *ecdsa.PrivateKey, con *Contract, args ...any) (common.Address, error) {
	data, err := con.DeployData(args...)
	if err != nil {
		return common.Address{}, err
	}
	r, err := c.Transact(ctx, key, nil, nil, data)
	if err != nil {
		return common.Address{}, fmt.Errorf("deploy %s: %w", con.Name, err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		return common.Address{}, fmt.Errorf("deploy %s: creation reverted in tx %s", con.Name, r.TxHash.Hex())
	}
	return r.ContractAddress, nil
}

// MustDeploy is Deploy for a test: it fails the test on error.
func (c *Chain) MustDeploy(t testing.TB, key DevKey, con *Contract, args ...any) common.Address {
	t.Helper()
	addr, err := c.Deploy(context.Background(), key.Key, con, args...)
	if err != nil {
		t.Fatalf("evmtest: %v", err)
	}
	return addr
}

// Transact sends a transaction from key to to (nil: a contract creation)
// with value (nil: none) and data, its gas estimated by the node, commits a
// block and returns the receipt, whatever its status: a transaction that
// would revert is refused by the estimate instead.
func (c *Chain) Transact(ctx context.Context, key *ecdsa.PrivateKey, to *common.Address, value *big.Int,
	data []byte) (*types.Receipt, error) {
	if value == nil {
		value = new(big.Int)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	cl := c.Backend.Client()
	gas, err := cl.EstimateGas(ctx, ethereum.CallMsg{From: from, To: to, Value: value, Data: data})
	if err != nil {
		return nil, fmt.Errorf("estimate gas: %w", err)
	}
	tx, err := c.sendTx(ctx, key, to, value, data, gas, nil)
	if err != nil {
		return nil, err
	}
	if err := c.waitPending(ctx, from, tx.Nonce()+1); err != nil {
		return nil, err
	}
	c.Commit()
	// The pool had it pending, so this block or an earlier one of a mining
	// ticker holds it; the receipt is readable once the block is indexed.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		r, err := cl.TransactionReceipt(ctx, tx.Hash())
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, ethereum.NotFound) {
			return nil, fmt.Errorf("receipt of %s: %w", tx.Hash().Hex(), err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("receipt of %s: %w", tx.Hash().Hex(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// MustTransact is Transact for a test: it fails the test on error and when
// the receipt's status is not success.
func (c *Chain) MustTransact(t testing.TB, key DevKey, to common.Address, value *big.Int, data []byte) *types.Receipt {
	t.Helper()
	r, err := c.Transact(context.Background(), key.Key, &to, value, data)
	if err != nil {
		t.Fatalf("evmtest: transact: %v", err)
	}
	if r.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("evmtest: transact: tx %s failed", r.TxHash.Hex())
	}
	return r
}
