package evmtest

import (
	"crypto/ecdsa"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

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
