package evmtest

import (
	"crypto/ecdsa"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

// GasBurner is the address of a contract whose whole code is the INVALID
// opcode (0xfe): a call to it fails at once and uses its entire gas limit,
// which counts toward the block's gas used like any other. Filling blocks
// past the gas target with such calls raises the base fee (EIP-1559) at no
// cost in CPU. Put it in a genesis with GasBurnerAccount.
var GasBurner = common.HexToAddress("0x00000000000000000000000000000000000fe0fe")

// GasBurnerAccount is GasBurner's genesis account.
func GasBurnerAccount() types.Account {
	return types.Account{Code: []byte{0xfe}, Balance: new(big.Int)}
}

// DevKey is a DEVELOPMENT-ONLY key pair. Its private key is derived from a
// public string: anyone can spend what it holds on any chain. Never fund it
// anywhere but a local test chain.
type DevKey struct {
	Key     *ecdsa.PrivateKey
	Address common.Address
}

// DevKeys returns n deterministic DEVELOPMENT-ONLY keys: key i is
// keccak256("txfence development key <i>"). The same n keys come back on
// every call, in every process.
func DevKeys(n int) []DevKey {
	keys := make([]DevKey, n)
	for i := range keys {
		seed := crypto.Keccak256([]byte(fmt.Sprintf("txfence development key %d", i)))
		key, err := crypto.ToECDSA(seed)
		if err != nil {
			// A keccak output is a valid secp256k1 scalar with overwhelming
			// probability; the seeds above are fixed and checked by the tests.
			panic(fmt.Sprintf("evmtest: dev key %d: %v", i, err))
		}
		keys[i] = DevKey{Key: key, Address: crypto.PubkeyToAddress(key.PublicKey)}
	}
	return keys
}

// NamedDevKey returns the DEVELOPMENT-ONLY key keccak256("txfence
// development key <name>"), for accounts a tool needs besides the signers
// (a funder, a spammer). A name that is not a decimal number never gives
// one of the DevKeys.
func NamedDevKey(name string) DevKey {
	key, err := crypto.ToECDSA(crypto.Keccak256([]byte("txfence development key " + name)))
	if err != nil {
		panic(fmt.Sprintf("evmtest: dev key %q: %v", name, err))
	}
	return DevKey{Key: key, Address: crypto.PubkeyToAddress(key.PublicKey)}
}

// DevBalance is what FundedAlloc gives each key: one million ether.
func DevBalance() *big.Int {
	return new(big.Int).Mul(big.NewInt(1_000_000), big.NewInt(1e18))
}

// FundedAlloc is a genesis allocation giving each key balance (DevBalance
// when nil).
func FundedAlloc(keys []DevKey, balance *big.Int) types.GenesisAlloc {
	if balance == nil {
		balance = DevBalance()
	}
	alloc := make(types.GenesisAlloc, len(keys))
	for _, k := range keys {
		alloc[k.Address] = types.Account{Balance: new(big.Int).Set(balance)}
	}
	return alloc
}
