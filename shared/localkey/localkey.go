// Package localkey is a development-only txm.Signer over a secp256k1 private
// key held in process memory, read from a hex string, an environment
// variable or a file. It exists for the emulator, tests and throwaway
// networks; production signers use shared/kms, where the key never leaves the
// HSM.
//
// The key is never printed: a Signer formats (fmt, %#v, slog) as its address
// only, and no error this package returns quotes the key text.
package localkey

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/txfence/txfence/shared/txm"
)

// Sentinel errors.
var (
	// ErrInvalidKey means the key text is not 64 hex digits (with or without
	// 0x) of a valid secp256k1 private key. The error never contains the text.
	ErrInvalidKey = errors.New("invalid private key")

	// ErrKeyNotSet means the environment variable is unset or empty.
	ErrKeyNotSet = errors.New("private key not set")
)

// keyHexLen is the length of a 32-byte key in hex digits, without 0x.
const keyHexLen = 2 * 32

// Signer signs with an in-memory private key. Its zero value is not usable;
// build one with New, FromHex, FromEnv or FromFile.
type Signer struct {
	key  *ecdsa.PrivateKey
	addr common.Address
}

var _ txm.Signer = (*Signer)(nil)

// New wraps an existing private key.
func New(key *ecdsa.PrivateKey) (*Signer, error) {
	if key == nil || key.D == nil {
		return nil, errors.New("new local signer: key is required")
	}
	return &Signer{key: key, addr: crypto.PubkeyToAddress(key.PublicKey)}, nil
}

// FromHex parses a private key written as 64 hex digits, with or without a
// 0x prefix. Surrounding whitespace is ignored.
func FromHex(text string) (*Signer, error) {
	s := strings.TrimSpace(text)
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		s = s[2:]
	}
	if len(s) != keyHexLen {
		return nil, fmt.Errorf("parse key: %w: want %d hex digits, got %d characters", ErrInvalidKey, keyHexLen, len(s))
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		// hex errors quote the offending byte; report only that it is not hex.
		return nil, fmt.Errorf("parse key: %w: not hexadecimal", ErrInvalidKey)
	}
	key, err := crypto.ToECDSA(b)
	clear(b)
	if err != nil {
		// ToECDSA's messages carry no key material, but keep ours uniform.
		return nil, fmt.Errorf("parse key: %w: not a valid secp256k1 scalar", ErrInvalidKey)
	}
	return New(key)
}

// FromEnv reads the key from the environment variable varName through lookup
// (os.LookupEnv in production, a map in tests).
func FromEnv(lookup func(string) (string, bool), varName string) (*Signer, error) {
	if lookup == nil {
		return nil, errors.New("read key from env: lookup is required")
	}
	if varName == "" {
		return nil, errors.New("read key from env: variable name is required")
	}
	v, ok := lookup(varName)
	if !ok || strings.TrimSpace(v) == "" {
		return nil, fmt.Errorf("read key from env %s: %w", varName, ErrKeyNotSet)
	}
	s, err := FromHex(v)
	if err != nil {
		return nil, fmt.Errorf("read key from env %s: %w", varName, err)
	}
	return s, nil
}

// FromFile reads the key from a file holding its hex text; surrounding
// whitespace (a trailing newline) is ignored.
func FromFile(path string) (*Signer, error) {
	if path == "" {
		return nil, errors.New("read key file: path is required")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key file: %w", err)
	}
	s, err := FromHex(string(b))
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("read key file %s: %w", path, err)
	}
	return s, nil
}

// Address is the signer's Ethereum address.
func (s *Signer) Address() common.Address { return s.addr }

// SignTx signs tx for chainID with the latest signer go-ethereum knows for
// that chain, so legacy (EIP-155), access-list, EIP-1559 and later
// transaction types all work.
func (s *Signer) SignTx(ctx context.Context, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	if tx == nil || chainID == nil {
		return nil, errors.New("sign tx: transaction and chain id are required")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sign tx: %w", err)
	}
	signed, err := types.SignTx(tx, types.LatestSignerForChainID(chainID), s.key)
	if err != nil {
		return nil, fmt.Errorf("sign tx: %w", err)
	}
	return signed, nil
}

// String shows the address only.
func (s Signer) String() string { return "localkey.Signer(" + s.addr.Hex() + ")" }

// GoString shows the address only, for %#v.
func (s Signer) GoString() string { return s.String() }

// Format prints String for every verb, so no fmt verb (%d, %x, %+v ...) can
// reach the key's fields.
func (s Signer) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// LogValue logs the address only.
func (s Signer) LogValue() slog.Value { return slog.StringValue(s.addr.Hex()) }
