package config

import (
	"errors"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSendOnly_Load: send-only endpoints are read per chain, with their
// options; bad ones are refused naming the endpoint, never quoting a URL.
func TestSendOnly_Load(t *testing.T) {
	t.Parallel()
	a1 := common.HexToAddress("0x00000000000000000000000000000000000000a1")
	usdt := common.HexToAddress("0xdAC17F958D2ee523a2206206994597C13D831ec7")
	e := validEnv()
	e[EnvSendOnly] = "1=protect=https://rpc.protect.example/KEY;signers=0x00000000000000000000000000000000000000a1|0xdAC17F958D2ee523a2206206994597C13D831ec7, " +
		"1=relay=https://relay.example/?apikey=KEY;fallback, 1337=local=http://127.0.0.1:9545;fallback;signers=0x00000000000000000000000000000000000000a1"
	c, err := Load(env(e))
	require.NoError(t, err)
	require.Len(t, c.SendOnly, 3)
	assert.Equal(t, SendOnly{ChainID: 1, Name: "protect", URL: "https://rpc.protect.example/KEY", Signers: []common.Address{a1, usdt}}, c.SendOnly[0])
	assert.Equal(t, SendOnly{ChainID: 1, Name: "relay", URL: "https://relay.example/?apikey=KEY", PublicFallback: true}, c.SendOnly[1])
	assert.Equal(t, []SendOnly{c.SendOnly[2]}, c.SendOnlyFor(1337))
	assert.Equal(t, "chain 1 send-only relay (https://relay.example/...)", c.SendOnly[1].String())
	assert.Equal(t, []string{RoutePublic, "protect", "relay"}, c.SendVia(1))
	assert.Equal(t, []string{RoutePublic, "protect", "relay"}, c.Create().SendVia[1])

	// A private endpoint that names no signer takes only the creates that
	// name it (sendVia).
	e[EnvSendOnly] = "1=protect=https://rpc.protect.example/KEY"
	c, err = Load(env(e))
	require.NoError(t, err)
	assert.Equal(t, []SendOnly{{ChainID: 1, Name: "protect", URL: "https://rpc.protect.example/KEY"}}, c.SendOnly)

	bad := map[string]string{
		"1=protect":                                                                    "must be CHAIN_ID=NAME=URL",
		"x=protect=https://p.example/KEY":                                              "must be CHAIN_ID=NAME=URL",
		"5=protect=https://p.example/KEY;fallback":                                     "chain 5 is not in TXFENCE_CHAINS",
		"1=public=https://p.example/KEY;fallback":                                      "the name must be",
		"1=a b=https://p.example/KEY;fallback":                                         "the name must be",
		"1=p=ftp://p.example/KEY;fallback":                                             "must start with http",
		"1=p=https://u:KEY@p:x/KEY;fallback":                                           "does not parse",
		"1=p=https://p.example/KEY;fast":                                               "must be fallback or signers",
		"1=p=https://p.example/KEY;signers=0x12":                                       "signer",
		"1=p=https://p.example/KEY;fallback,1=p=https://q.example/KEY;fallback":        "named twice",
		"1=p=https://p.example/KEY;signers=0x00000000000000000000000000000000000000b2": "not in TXFENCE_SIGNERS",
		"1=p=https://p.example/KEY;signers=0x00000000000000000000000000000000000000a1,1=q=https://q.example/KEY;signers=0x00000000000000000000000000000000000000a1": "two routes",
	}
	for value, want := range bad {
		t.Run(value, func(t *testing.T) {
			e := validEnv()
			e[EnvSendOnly] = value
			_, err := Load(env(e))
			require.Error(t, err)
			var cerr *Error
			require.True(t, errors.As(err, &cerr))
			assert.Equal(t, []string{EnvSendOnly}, cerr.Vars())
			assert.Contains(t, err.Error(), want)
			assert.NotContains(t, err.Error(), "KEY", "a URL's key is never quoted")
		})
	}
}
