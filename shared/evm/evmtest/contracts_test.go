package evmtest_test

import (
	"bytes"
	"context"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/testsupport"
)

// TestIssue47_ContractsCurrent: the committed artefacts are what the pinned
// solc-js makes of the Solidity sources, byte for byte, with none missing
// and none left over. It needs node and the solc-js that make solcjs
// installs (make test does); without them it skips, except under CI.
func TestIssue47_ContractsCurrent(t *testing.T) {
	t.Parallel()
	root := testsupport.ModuleRoot(t)
	solc := filepath.Join(root, ".tools", "solc", "node_modules", "solc")
	node, nodeErr := exec.LookPath("node")
	_, solcErr := os.Stat(filepath.Join(solc, "package.json"))
	if nodeErr != nil || solcErr != nil {
		if os.Getenv("CI") == "" {
			t.Skip("solc-js is not installed (node or .tools/solc missing): run make solcjs, or make contracts")
		}
		t.Fatalf("solc-js is not installed under CI: node: %v; .tools/solc: %v (make test installs it with make solcjs)", nodeErr, solcErr)
	}
	contracts := filepath.Join(root, "shared", "evm", "evmtest", "contracts")
	out := t.TempDir()
	cmd := exec.Command(node, filepath.Join(contracts, "compile.js"), "--solc", solc, "--out", out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "compile.js: %s", b)

	committed := jsonFiles(t, filepath.Join(contracts, "artifacts"))
	fresh := jsonFiles(t, out)
	require.Equal(t, names(fresh), names(committed),
		"the committed artefacts are not the contracts of the sources: run make contracts")
	for name, want := range fresh {
		require.True(t, bytes.Equal(want, committed[name]),
			"contracts/artifacts/%s is not what solc-js makes of the sources: run make contracts", name)
	}
	for _, name := range names(committed) {
		_, err := evmtest.LoadContract(name[:len(name)-len(".json")])
		require.NoError(t, err)
	}
}

func jsonFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.json"))
	require.NoError(t, err)
	files := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		files[filepath.Base(p)] = b
	}
	return files
}

func names(files map[string][]byte) []string {
	var out []string
	for n := range files {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// TestContracts_Behave: each test contract deploys on the simulated chain
// and emits the standard events of what it is for.
func TestContracts_Behave(t *testing.T) {
	t.Parallel()
	keys := evmtest.DevKeys(3)
	owner, alice, bob := keys[0], keys[1], keys[2]
	chain := evmtest.Start(t, evmtest.FundedAlloc(keys, nil))
	ctx := context.Background()
	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)

	// topics returns the event's signature hash, for matching logs.
	topic := func(c *evmtest.Contract, event string) common.Hash { return c.ABI.Events[event].ID }
	pack := func(c *evmtest.Contract, method string, args ...any) []byte {
		data, err := c.Pack(method, args...)
		require.NoError(t, err)
		return data
	}
	call := func(to common.Address, c *evmtest.Contract, method string, args ...any) []any {
		out, err := ec.CallContract(ctx, ethereum.CallMsg{To: &to, Data: pack(c, method, args...)}, nil)
		require.NoError(t, err)
		vals, err := c.ABI.Unpack(method, out)
		require.NoError(t, err)
		return vals
	}

	t.Run("ERC20", func(t *testing.T) {
		erc20 := evmtest.ERC20()
		token := chain.MustDeploy(t, owner, erc20, "Test", "TST", owner.Address, big.NewInt(1000))
		require.Equal(t, big.NewInt(1000), call(token, erc20, "balanceOf", owner.Address)[0])

		r := chain.MustTransact(t, owner, token, nil, pack(erc20, "transfer", alice.Address, big.NewInt(300)))
		require.Len(t, r.Logs, 1)
		require.Equal(t, topic(erc20, "Transfer"), r.Logs[0].Topics[0])
		require.Equal(t, common.BytesToHash(alice.Address[:]), r.Logs[0].Topics[2])

		r = chain.MustTransact(t, alice, token, nil, pack(erc20, "approve", bob.Address, big.NewInt(100)))
		require.Equal(t, topic(erc20, "Approval"), r.Logs[0].Topics[0])
		chain.MustTransact(t, bob, token, nil, pack(erc20, "transferFrom", alice.Address, bob.Address, big.NewInt(60)))
		require.Equal(t, big.NewInt(240), call(token, erc20, "balanceOf", alice.Address)[0])
		require.Equal(t, big.NewInt(40), call(token, erc20, "allowance", alice.Address, bob.Address)[0])

		// Over the allowance: the estimate refuses it.
		_, err := chain.Transact(ctx, bob.Key, &token, nil,
			pack(erc20, "transferFrom", alice.Address, bob.Address, big.NewInt(41)))
		require.ErrorContains(t, err, "insufficient allowance")
	})

	t.Run("ERC721", func(t *testing.T) {
		erc721 := evmtest.ERC721()
		nft := chain.MustDeploy(t, owner, erc721)
		chain.MustTransact(t, owner, nft, nil, pack(erc721, "mint", owner.Address, big.NewInt(7)))
		r := chain.MustTransact(t, owner, nft, nil, pack(erc721, "approve", alice.Address, big.NewInt(7)))
		require.Equal(t, topic(erc721, "Approval"), r.Logs[0].Topics[0])
		r = chain.MustTransact(t, alice, nft, nil,
			pack(erc721, "safeTransferFrom", owner.Address, bob.Address, big.NewInt(7)))
		require.Len(t, r.Logs, 1)
		require.Equal(t, topic(erc721, "Transfer"), r.Logs[0].Topics[0])
		require.Equal(t, common.BigToHash(big.NewInt(7)), r.Logs[0].Topics[3])
		require.Equal(t, bob.Address, call(nft, erc721, "ownerOf", big.NewInt(7))[0])
		r = chain.MustTransact(t, bob, nft, nil,
			pack(erc721, "transferFrom", bob.Address, alice.Address, big.NewInt(7)))
		require.Equal(t, topic(erc721, "Transfer"), r.Logs[0].Topics[0])
		require.Equal(t, alice.Address, call(nft, erc721, "ownerOf", big.NewInt(7))[0])
	})

	t.Run("ERC1155", func(t *testing.T) {
		erc1155 := evmtest.ERC1155()
		multi := chain.MustDeploy(t, owner, erc1155)
		r := chain.MustTransact(t, owner, multi, nil,
			pack(erc1155, "mint", owner.Address, big.NewInt(1), big.NewInt(50), []byte{}))
		require.Equal(t, topic(erc1155, "TransferSingle"), r.Logs[0].Topics[0])
		chain.MustTransact(t, owner, multi, nil,
			pack(erc1155, "mint", owner.Address, big.NewInt(2), big.NewInt(5), []byte{}))
		r = chain.MustTransact(t, owner, multi, nil,
			pack(erc1155, "safeTransferFrom", owner.Address, alice.Address, big.NewInt(1), big.NewInt(20), []byte{}))
		require.Equal(t, topic(erc1155, "TransferSingle"), r.Logs[0].Topics[0])
		r = chain.MustTransact(t, owner, multi, nil, pack(erc1155, "safeBatchTransferFrom", owner.Address,
			bob.Address, []*big.Int{big.NewInt(1), big.NewInt(2)}, []*big.Int{big.NewInt(10), big.NewInt(5)}, []byte{}))
		require.Len(t, r.Logs, 1)
		require.Equal(t, topic(erc1155, "TransferBatch"), r.Logs[0].Topics[0])
		got := call(multi, erc1155, "balanceOfBatch",
			[]common.Address{owner.Address, alice.Address, bob.Address, bob.Address},
			[]*big.Int{big.NewInt(1), big.NewInt(1), big.NewInt(1), big.NewInt(2)})[0]
		require.Equal(t, []*big.Int{big.NewInt(20), big.NewInt(20), big.NewInt(10), big.NewInt(5)}, got)
	})

	t.Run("Forwarder", func(t *testing.T) {
		fwd := evmtest.Forwarder()
		addr := chain.MustDeploy(t, owner, fwd)
		sink1, sink2 := common.HexToAddress("0x5151"), common.HexToAddress("0x5252")
		chain.MustTransact(t, owner, addr, big.NewInt(1001), pack(fwd, "split", sink1, sink2))
		for sink, want := range map[common.Address]int64{sink1: 500, sink2: 501, addr: 0} {
			bal, err := ec.BalanceAt(ctx, sink, nil)
			require.NoError(t, err)
			require.Zero(t, big.NewInt(want).Cmp(bal), "%s has %s", sink.Hex(), bal)
		}
		r := chain.MustTransact(t, owner, addr, big.NewInt(9), pack(fwd, "forward", sink1))
		require.Equal(t, topic(fwd, "Forwarded"), r.Logs[0].Topics[0])
	})

	t.Run("Reverter", func(t *testing.T) {
		rev := evmtest.Reverter()
		addr := chain.MustDeploy(t, owner, rev)
		for _, data := range [][]byte{
			pack(rev, "failWithReason"), pack(rev, "failWithPanic", big.NewInt(0)),
			pack(rev, "failWithCustom", big.NewInt(1)), pack(rev, "failWithoutData"),
		} {
			_, err := ec.CallContract(ctx, ethereum.CallMsg{To: &addr, Data: data}, nil)
			require.ErrorContains(t, err, "execution reverted")
		}
		out, err := ec.CallContract(ctx, ethereum.CallMsg{To: &addr, Data: pack(rev, "failWithPanic", big.NewInt(1))}, nil)
		require.NoError(t, err)
		require.Equal(t, common.BigToHash(big.NewInt(1)).Bytes(), out)
	})
}

// TestContracts_LoadUnknown: an unknown name is an error, not a panic.
func TestContracts_LoadUnknown(t *testing.T) {
	t.Parallel()
	_, err := evmtest.LoadContract("NoSuchContract")
	require.ErrorIs(t, err, fs.ErrNotExist)
}

// TestContracts_Predeploys: the predeploys answer from genesis, their fee
// follows the size of what they are asked about, and their setters move it.
func TestContracts_Predeploys(t *testing.T) {
	t.Parallel()
	keys := evmtest.DevKeys(1)
	alloc := evmtest.FundedAlloc(keys, nil)
	evmtest.InstallPredeploys(alloc)
	chain := evmtest.Start(t, alloc)
	ctx := context.Background()
	ec, err := ethclient.DialContext(ctx, chain.URL)
	require.NoError(t, err)
	t.Cleanup(ec.Close)
	call := func(to common.Address, c *evmtest.Contract, method string, args ...any) []any {
		data, err := c.Pack(method, args...)
		require.NoError(t, err)
		out, err := ec.CallContract(ctx, ethereum.CallMsg{To: &to, Data: data}, nil)
		require.NoError(t, err)
		vals, err := c.ABI.Unpack(method, out)
		require.NoError(t, err)
		return vals
	}
	gpo, ni := evmtest.GasPriceOracle(), evmtest.NodeInterface()
	gwei := evmtest.GenesisL1BaseFee

	fee := func(n int) *big.Int {
		return call(evmtest.GasPriceOracleAddress, gpo, "getL1Fee", make([]byte, n))[0].(*big.Int)
	}
	require.Equal(t, new(big.Int).Mul(big.NewInt(16*100+188), gwei), fee(100))
	require.Equal(t, new(big.Int).Mul(big.NewInt(16*101+188), gwei), fee(101))
	set, err := gpo.Pack("setL1BaseFee", big.NewInt(7))
	require.NoError(t, err)
	chain.MustTransact(t, keys[0], evmtest.GasPriceOracleAddress, nil, set)
	require.Equal(t, big.NewInt((16*100+188)*7), fee(100))

	l1 := func(n int) []any {
		return call(evmtest.NodeInterfaceAddress, ni, "gasEstimateL1Component", keys[0].Address, false, make([]byte, n))
	}
	got := l1(60)
	require.Equal(t, uint64((60+140)*16), got[0])
	require.Equal(t, gwei, got[2])
	set, err = ni.Pack("setGasPerByte", big.NewInt(3))
	require.NoError(t, err)
	chain.MustTransact(t, keys[0], evmtest.NodeInterfaceAddress, nil, set)
	require.Equal(t, uint64((60+140)*3), l1(60)[0])
}
