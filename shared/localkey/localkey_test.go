package localkey

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The key/address vector from go-ethereum's crypto tests.
var (
	devKeyHex  = "289c2857d4598e37fb9647507e47a309d6133539bf21a8b9cb6df88fd5232032"
	devAddress = common.HexToAddress("0x970e8128ab834e8eac17ab8e3812f010678cf791").Hex()
)

func TestFromHex(t *testing.T) {
	t.Parallel()
	for _, in := range []string{devKeyHex, "0x" + devKeyHex, "0X" + strings.ToUpper(devKeyHex), "  0x" + devKeyHex + "\n"} {
		s, err := FromHex(in)
		require.NoError(t, err, "input %q", in)
		assert.Equal(t, common.HexToAddress(devAddress), s.Address())
	}

	bad := []struct{ name, in string }{
		{"empty", ""},
		{"short", devKeyHex[:62]},
		{"long", devKeyHex + "00"},
		{"non-hex", "zz" + devKeyHex[2:]},
		{"zero scalar", strings.Repeat("0", 64)},
		{"scalar >= N", strings.Repeat("f", 64)},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromHex(tc.in)
			require.ErrorIs(t, err, ErrInvalidKey)
			if len(tc.in) >= 8 {
				assert.NotContains(t, err.Error(), tc.in[2:10], "error must not echo key text")
			}
		})
	}
}

func TestFromEnv(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DEV_KEY": "0x" + devKeyHex, "EMPTY": " ", "BAD": "0x1234"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	s, err := FromEnv(lookup, "DEV_KEY")
	require.NoError(t, err)
	assert.Equal(t, common.HexToAddress(devAddress), s.Address())

	_, err = FromEnv(lookup, "MISSING")
	require.ErrorIs(t, err, ErrKeyNotSet)
	assert.Contains(t, err.Error(), "MISSING")
	_, err = FromEnv(lookup, "EMPTY")
	require.ErrorIs(t, err, ErrKeyNotSet)
	_, err = FromEnv(lookup, "BAD")
	require.ErrorIs(t, err, ErrInvalidKey)
	_, err = FromEnv(nil, "DEV_KEY")
	require.Error(t, err)
}

func TestFromFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(good, []byte("0x"+devKeyHex+"\n"), 0o600))
	s, err := FromFile(good)
	require.NoError(t, err)
	assert.Equal(t, common.HexToAddress(devAddress), s.Address())

	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("not a key "+devKeyHex[:20]), 0o600))
	_, err = FromFile(bad)
	require.ErrorIs(t, err, ErrInvalidKey)
	assert.NotContains(t, err.Error(), devKeyHex[:20])

	_, err = FromFile(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestSignerNeverPrintsKey(t *testing.T) {
	t.Parallel()
	s, err := FromHex(devKeyHex)
	require.NoError(t, err)
	dec, ok := new(big.Int).SetString(devKeyHex, 16)
	require.True(t, ok)

	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("hi", "signer", s)
	outputs := []string{
		s.String(), fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %x %d", s, s, s, s, s, s),
		fmt.Sprintf("%v %+v %#v %d", *s, *s, *s, *s), logged.String(),
	}
	for _, out := range outputs {
		assert.NotContains(t, strings.ToLower(out), devKeyHex)
		assert.NotContains(t, out, dec.String())
	}
	assert.Contains(t, s.String(), devAddress)
	assert.Contains(t, logged.String(), `"signer":"`+devAddress+`"`)
}

func TestSignTx(t *testing.T) {
	t.Parallel()
	s, err := FromHex(devKeyHex)
	require.NoError(t, err)
	chainID := big.NewInt(1337)
	to := common.HexToAddress("0x00000000000000000000000000000000000000a1")
	txs := []*types.Transaction{
		types.NewTx(&types.DynamicFeeTx{ChainID: chainID, Nonce: 3, GasTipCap: big.NewInt(1e9), GasFeeCap: big.NewInt(2e9), Gas: 21000, To: &to, Value: big.NewInt(1)}),
		types.NewTx(&types.LegacyTx{Nonce: 4, GasPrice: big.NewInt(2e9), Gas: 21000, To: &to, Value: big.NewInt(1)}),
	}
	for _, tx := range txs {
		signed, err := s.SignTx(context.Background(), tx, chainID)
		require.NoError(t, err)
		from, err := types.Sender(types.LatestSignerForChainID(chainID), signed)
		require.NoError(t, err)
		assert.Equal(t, s.Address(), from)
		assert.Equal(t, chainID, signed.ChainId())
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.SignTx(ctx, txs[0], chainID)
	require.True(t, errors.Is(err, context.Canceled))
	_, err = s.SignTx(context.Background(), nil, chainID)
	require.Error(t, err)
}

func TestNew(t *testing.T) {
	t.Parallel()
	_, err := New(nil)
	require.Error(t, err)
	key, err := crypto.GenerateKey()
	require.NoError(t, err)
	s, err := New(key)
	require.NoError(t, err)
	again, err := FromHex(hex.EncodeToString(crypto.FromECDSA(key)))
	require.NoError(t, err)
	assert.Equal(t, s.Address(), again.Address())
}
