package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestIssue14_Banner: make dev's banner gives the console's URL; on the
// simulated chain it calls the signers funded and offers the reorg
// endpoint, and with -rpc pointing at another chain it does neither and
// says the signers must be funded there.
func TestIssue14_Banner(t *testing.T) {
	b := banner{Ready: 3 * time.Second, APIURL: "http://127.0.0.1:8080/Api", ChainID: 1337, RPCURL: "http://127.0.0.1:8545",
		PubSubHost: "127.0.0.1:8085", DatabaseURL: "postgres://x", Simulated: true, AdminPort: 8099,
		Signers: []string{"0x00000000000000000000000000000000000000a1", "0x00000000000000000000000000000000000000a2"}, Key: "txfk_k_0123456789abcdef_secret"}
	var sim bytes.Buffer
	printBanner(&sim, b)
	out := sim.String()
	t.Log(out)
	assert.Contains(t, out, "  console               http://127.0.0.1:8080/Api/console/\n")
	assert.Contains(t, out, "http://127.0.0.1:8099/reorg?depth=2")
	assert.Contains(t, out, "(funded at genesis;")
	assert.Contains(t, out, "0x00000000000000000000000000000000000000a2")
	assert.Contains(t, out, "export TXFENCE_KEY=txfk_k_0123456789abcdef_secret")

	b.Simulated, b.RPCURL = false, "http://127.0.0.1:9545"
	var ext bytes.Buffer
	printBanner(&ext, b)
	out = ext.String()
	assert.Contains(t, out, "  console               http://127.0.0.1:8080/Api/console/\n")
	assert.NotContains(t, out, "reorg", "that chain has no reorg endpoint")
	assert.NotContains(t, out, "funded at genesis")
	assert.Contains(t, out, "NOT funded: send each of these gas money on that chain before using it")
	assert.Contains(t, out, "0x00000000000000000000000000000000000000a1")

	b.RPCURL = "https://user:pw@eth-mainnet.example/v2/PROVIDERKEY?apikey=QUERYKEY"
	var keyed bytes.Buffer
	printBanner(&keyed, b)
	out = keyed.String()
	assert.Contains(t, out, "https://eth-mainnet.example/...", "a provider's URL is named by its host")
	for _, secret := range []string{"user:pw", "PROVIDERKEY", "QUERYKEY"} {
		assert.NotContains(t, out, secret)
	}
}
