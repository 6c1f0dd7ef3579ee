package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/testsupport"
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

// curlCommands are the banner's curl commands, each on one line (a line
// ending in a backslash continues on the next).
func curlCommands(banner string) []string {
	var out []string
	lines := strings.Split(banner, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "curl ") {
			continue
		}
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + strings.TrimSpace(lines[i])
		}
		out = append(out, l)
	}
	return out
}

// TestIssue46_Banner: every curl the banner gives for the API carries the
// credential, in development mode and as deployed; the banner says which
// mode runs, that every caller is rate limited and at what rate, and, on
// the simulated chain, how to hold the chain and reorganise the block of a
// transaction.
func TestIssue46_Banner(t *testing.T) {
	b := banner{Ready: time.Second, APIURL: "http://127.0.0.1:8080/Api", ChainID: 1337, RPCURL: "http://127.0.0.1:8545",
		PubSubHost: "127.0.0.1:8085", DatabaseURL: "postgres://x", Simulated: true, AdminPort: 8099,
		Signers: []string{"0x00000000000000000000000000000000000000a1"}, Key: "txfk_k_0123456789abcdef_secret",
		Confirmations: 3, Rate: 200, Burst: 400}
	for _, auth := range []string{"dev,apikey", "apikey"} {
		t.Run(auth, func(t *testing.T) {
			b.Auth = auth
			var buf bytes.Buffer
			printBanner(&buf, b)
			out := buf.String()
			cmds := curlCommands(out)
			api := 0
			for _, c := range cmds {
				if strings.Contains(c, b.APIURL) {
					api++
					assert.Contains(t, c, `-H "Authorization: Bearer $TXFENCE_KEY"`, "%s", c)
				}
			}
			assert.GreaterOrEqual(t, api, 4, "create, get, completions, get with its history: %q", cmds)
			assert.Contains(t, cmds, "curl -s -X POST http://127.0.0.1:8099/hold")
			assert.Contains(t, cmds, "curl -s -X POST 'http://127.0.0.1:8099/reorg?depth=1'")
			assert.Contains(t, out, "rate limited per server as deployed:\n200 calls/s, bursts of 400")
			assert.Contains(t, out, "go run ./examples/go/sendmany -api http://127.0.0.1:8080/Api -n 1000\n", "how to run the Go example")
			assert.Contains(t, out, "make example-ts URL=http://127.0.0.1:8080/Api N=1000\n", "how to run the TypeScript example")
			if auth == "apikey" {
				assert.NotContains(t, out, "DEVELOPMENT MODE")
				assert.Contains(t, out, "AUTHENTICATION AS DEPLOYED (TXFENCE_AUTH=apikey): every call needs a bearer\ntoken.")
				assert.NotContains(t, out, `"dev"`)
			} else {
				assert.Contains(t, out, "DEVELOPMENT MODE (TXFENCE_AUTH=dev,apikey)")
				assert.Contains(t, out, `make dev ARGS="-auth apikey" runs without it`)
				assert.Contains(t, out, `Every caller, "dev" and local-admin included, is rate limited`)
			}
		})
	}
	b.Simulated = false
	var ext bytes.Buffer
	printBanner(&ext, b)
	assert.NotContains(t, ext.String(), "/hold", "another chain cannot be held")

	// The README's walk-through is the banner's, at make dev's ports.
	readme, err := os.ReadFile(filepath.Join(testsupport.ModuleRoot(t), "README.md"))
	require.NoError(t, err)
	b.Simulated = true
	var def bytes.Buffer
	printBanner(&def, b)
	for _, c := range curlCommands(def.String()) {
		if strings.Contains(c, "/hold") || strings.Contains(c, "/reorg") {
			assert.Contains(t, string(readme), c)
		}
	}
}

// TestIssue46_AuthFlag: -auth defaults to the caller's TXFENCE_AUTH (the
// stack no longer overrides it), else development mode; a value the servers
// would refuse, or one without the method of the printed key, is refused
// before anything starts.
func TestIssue46_AuthFlag(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	assert.Equal(t, "dev,apikey", authDefault(env(nil)))
	assert.Equal(t, "apikey", authDefault(env(map[string]string{"TXFENCE_AUTH": "apikey"})))

	for value, want := range map[string]string{"apikey": "apikey", "dev,apikey": "dev,apikey", " apikey , dev ": "apikey,dev"} {
		got, err := checkAuth(value, env(nil))
		require.NoError(t, err, value)
		assert.Equal(t, want, got)
	}
	for _, value := range []string{"dev", "", "apikey,magic", "oidc,apikey"} {
		_, err := checkAuth(value, env(nil))
		assert.Error(t, err, value)
	}
	got, err := checkAuth("oidc,apikey", env(map[string]string{"TXFENCE_OIDC_AUDIENCE": "https://txfence.example"}))
	require.NoError(t, err)
	assert.Equal(t, "oidc,apikey", got)
}

// TestIssue46_DevBuild: make dev builds the function server and the
// emulator, and not the soak binary it does not run.
func TestIssue46_DevBuild(t *testing.T) {
	cmd := exec.Command("make", "-n", "dev")
	cmd.Dir = testsupport.ModuleRoot(t)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "build -o bin/server ./functions/server")
	assert.Contains(t, string(out), "build -o bin/emulator ./emulator/cmd/emulator")
	assert.NotContains(t, string(out), "emulator/cmd/soak")
}
