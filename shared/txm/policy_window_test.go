package txm

import (
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue47_WindowPolicies: a policy's windows are read from and written
// to its JSON form (periods as "day" or whole minutes, days or hours, up to
// 31 days), a bad window is a validation error naming its field, and a
// request counts in the windows of its chain: a native window with its
// worst-case cost, a token's window with what its effects move of the token
// out of its signer (summed as the per-transaction cap sums them), and not
// at all when it moves none.
func TestIssue47_WindowPolicies(t *testing.T) {
	t.Parallel()
	var (
		signer = common.HexToAddress("0x00000000000000000000000000000000000051A1")
		other  = common.HexToAddress("0x0000000000000000000000000000000000000070")
		usdc   = common.HexToAddress("0x00000000000000000000000000000000000020c0")
		punks  = common.HexToAddress("0x0000000000000000000000000000000000000721")
	)
	n := big.NewInt

	t.Run("format", func(t *testing.T) {
		t.Parallel()
		full := `{"principal":"payments","roles":["sender"],"windows":[` +
			`{"scope":"signer","asset":"native","period":"1h","maxAmount":"1000000000000000000"},` +
			`{"scope":"principal","asset":"native","chainId":5,"period":"day","maxCount":20},` +
			`{"scope":"principal","asset":"0x00000000000000000000000000000000000020c0","chainId":1,"period":"7d","maxAmount":"10","maxCount":3},` +
			`{"scope":"signer","asset":"0x00000000000000000000000000000000000020c0","chainId":1,"period":"90m","maxAmount":"0"}]}`
		var p Policy
		require.NoError(t, json.Unmarshal([]byte(full), &p))
		require.NoError(t, p.Validate())
		assert.Equal(t, []Window{
			{Scope: WindowSigner, Period: time.Hour, MaxAmount: n(1e18)},
			{Scope: WindowPrincipal, ChainID: 5, Day: true, MaxCount: 20},
			{Scope: WindowPrincipal, Token: usdc, ChainID: 1, Period: 7 * 24 * time.Hour, MaxAmount: n(10), MaxCount: 3},
			{Scope: WindowSigner, Token: usdc, ChainID: 1, Period: 90 * time.Minute, MaxAmount: n(0)},
		}, p.Windows)
		assert.True(t, p.HasWindows())
		assert.True(t, p.WatchesSigners())
		assert.True(t, p.HasEffectRules(), "a token's window needs the effects")
		b, err := json.Marshal(p)
		require.NoError(t, err)
		assert.Equal(t, full, string(b), "the wire form round-trips")

		var native Policy
		require.NoError(t, json.Unmarshal([]byte(`{"principal":"p","roles":["sender"],"windows":[`+
			`{"scope":"principal","asset":"native","period":"1h30m","maxCount":1},{"scope":"principal","asset":"native","period":"31d","maxCount":1},`+
			`{"scope":"principal","asset":"native","period":"2d12h","maxCount":1},{"scope":"principal","asset":"native","period":"120m","maxCount":1}]}`), &native))
		require.NoError(t, native.Validate())
		texts := []string{}
		for _, w := range native.Windows {
			texts = append(texts, w.PeriodText())
		}
		assert.Equal(t, []string{"90m", "31d", "60h", "2h"}, texts, "periods are written in their largest whole unit")
		assert.False(t, native.HasEffectRules(), "native windows need no token effects")
		assert.False(t, native.WatchesSigners())

		var bare Policy
		require.NoError(t, json.Unmarshal([]byte(`{"principal":"p","roles":["sender"]}`), &bare))
		assert.Nil(t, bare.Windows)
		b, err = json.Marshal(bare)
		require.NoError(t, err)
		assert.NotContains(t, string(b), "windows", "no windows stay absent")

		window := func(w string) string { return `{"principal":"p","roles":["sender"],"windows":[` + w + `]}` }
		const tok = `"asset":"0x00000000000000000000000000000000000020c0"`
		many := strings.Repeat(`{"scope":"principal","asset":"native","period":"1m","maxCount":1},`, MaxWindows)
		for _, c := range []struct {
			name, body, field string
		}{
			{"unknown scope", window(`{"scope":"team","asset":"native","period":"1h","maxCount":1}`), "windows[0].scope"},
			{"missing scope", window(`{"asset":"native","period":"1h","maxCount":1}`), "windows[0].scope"},
			{"missing asset", window(`{"scope":"signer","period":"1h","maxCount":1}`), "windows[0].asset"},
			{"bad asset", window(`{"scope":"signer","asset":"ether","period":"1h","maxCount":1}`), "windows[0].asset"},
			{"zero token", window(`{"scope":"signer","asset":"0x0000000000000000000000000000000000000000","chainId":1,"period":"1h","maxCount":1}`), "windows[0].asset"},
			{"token without chain", window(`{"scope":"signer",` + tok + `,"period":"1h","maxCount":1}`), "windows[0].chainId"},
			{"missing period", window(`{"scope":"signer","asset":"native","maxCount":1}`), "windows[0].period"},
			{"seconds", window(`{"scope":"signer","asset":"native","period":"90s","maxCount":1}`), "windows[0].period"},
			{"less than a minute", window(`{"scope":"signer","asset":"native","period":"0m","maxCount":1}`), "windows[0].period"},
			{"negative period", window(`{"scope":"signer","asset":"native","period":"-1h","maxCount":1}`), "windows[0].period"},
			{"over 31 days", window(`{"scope":"signer","asset":"native","period":"32d","maxCount":1}`), "windows[0].period"},
			{"31 days and a minute", window(`{"scope":"signer","asset":"native","period":"31d1m","maxCount":1}`), "windows[0].period"},
			{"words period", window(`{"scope":"signer","asset":"native","period":"weekly","maxCount":1}`), "windows[0].period"},
			{"days twice", window(`{"scope":"signer","asset":"native","period":"1d1d","maxCount":1}`), "windows[0].period"},
			{"limits nothing", window(`{"scope":"signer","asset":"native","period":"1h"}`), "windows[0]"},
			{"negative amount", window(`{"scope":"signer","asset":"native","period":"1h","maxAmount":"-1"}`), "windows[0].maxAmount"},
			{"fractional amount", window(`{"scope":"signer","asset":"native","period":"1h","maxAmount":"1.5"}`), "windows[0].maxAmount"},
			{"zero count", window(`{"scope":"signer","asset":"native","period":"1h","maxCount":0}`), "windows[0].maxCount"},
			{"negative count", window(`{"scope":"signer","asset":"native","period":"1h","maxCount":-2}`), "windows[0].maxCount"},
			{"duplicate", window(`{"scope":"signer","asset":"native","period":"60m","maxCount":1},{"scope":"signer","asset":"native","period":"1h","maxAmount":"5"}`), "windows[1]"},
			{"too many", window(many + `{"scope":"signer","asset":"native","period":"1h","maxCount":1}`), "windows"},
		} {
			p := Policy{Principal: "unchanged"}
			err := json.Unmarshal([]byte(c.body), &p)
			if err == nil {
				err = p.Validate()
			} else {
				assert.Equal(t, Policy{Principal: "unchanged"}, p, "%s: a rejected policy changes nothing", c.name)
			}
			var v *ValidationError
			if !assert.True(t, errors.As(err, &v), "%s: want a validation error, got %v", c.name, err) {
				continue
			}
			assert.ErrorIs(t, err, ErrInvalid, c.name)
			fields := make([]string, len(v.Fields))
			for i, f := range v.Fields {
				fields[i] = f.Field
			}
			if c.name == "too many" {
				assert.Contains(t, fields, c.field, "%s: %v", c.name, err)
				continue
			}
			assert.Equal(t, []string{c.field}, fields, "%s: %v", c.name, err)
		}

		// The same window over two periods, or two scopes, is two windows.
		var two Policy
		require.NoError(t, json.Unmarshal([]byte(window(`{"scope":"signer","asset":"native","period":"1h","maxCount":1},`+
			`{"scope":"signer","asset":"native","period":"day","maxCount":1},{"scope":"principal","asset":"native","period":"1h","maxCount":1}`)), &two))
		assert.NoError(t, two.Validate())
	})

	t.Run("checks", func(t *testing.T) {
		t.Parallel()
		p := Policy{Windows: []Window{
			{Scope: WindowSigner, Period: time.Hour, MaxAmount: n(100)},                   // native, every chain
			{Scope: WindowPrincipal, ChainID: 5, Day: true, MaxCount: 1},                  // native, chain 5 only
			{Scope: WindowPrincipal, Token: usdc, ChainID: 1, Day: true, MaxAmount: n(9)}, // usdc on chain 1
			{Scope: WindowSigner, Token: punks, ChainID: 1, Day: true, MaxCount: 2},       // an ERC-721 on chain 1
		}}
		r := &Request{ChainID: 1, From: signer, Value: n(7), Cost: n(7 + 21000*3), Effects: []Effect{
			{Kind: EffectNative, From: signer, To: usdc, Amount: n(7)},
			{Kind: EffectERC20Transfer, Token: usdc, From: signer, To: other, Amount: n(4)},
			{Kind: EffectERC20Transfer, Token: usdc, From: other, To: signer, Amount: n(100)},  // in, not out
			{Kind: EffectERC20Approval, Token: usdc, From: signer, To: other, Amount: n(1000)}, // an approval moves nothing
			{Kind: EffectERC20Transfer, Token: usdc, From: signer, To: other, Amount: n(3)},
			{Kind: EffectERC721Transfer, Token: punks, From: signer, To: other, Amount: n(1)},
		}}
		got := p.WindowChecks(r)
		require.Len(t, got, 3)
		assert.Equal(t, 0, got[0].Index)
		assert.Equal(t, n(7+21000*3), got[0].Amount, "native value counts the worst-case cost: fees count")
		assert.Equal(t, 2, got[1].Index)
		assert.Equal(t, n(7), got[1].Amount, "what moves out of the signer, summed")
		assert.Equal(t, 3, got[2].Index)
		assert.Equal(t, n(1), got[2].Amount)

		r5 := &Request{ChainID: 5, From: signer, Value: n(2)}
		got = p.WindowChecks(r5)
		require.Len(t, got, 2, "the windows of every chain and of chain 5, not chain 1's tokens")
		assert.Equal(t, []int{0, 1}, []int{got[0].Index, got[1].Index})
		assert.Equal(t, n(2), got[0].Amount, "without a cost counted, the value")

		none := &Request{ChainID: 1, From: signer, Cost: n(1)}
		got = p.WindowChecks(none)
		require.Len(t, got, 1, "a token's window does not count a transaction that moves none of it")
		assert.Equal(t, 0, got[0].Index)

		assert.Equal(t, map[common.Address]*big.Int{usdc: n(7), punks: n(1)}, TokensOut(signer, r.Effects))
	})

	t.Run("refusal", func(t *testing.T) {
		t.Parallel()
		p := Policy{Windows: []Window{
			{Scope: WindowSigner, Period: time.Hour, MaxAmount: n(100), MaxCount: 3},
			{Scope: WindowPrincipal, Token: usdc, ChainID: 1, Day: true, MaxAmount: n(9)},
		}}
		r := p.WindowRefusal(RuleWindowAmount, 0)
		assert.ErrorIs(t, r, ErrForbidden)
		assert.Equal(t, RuleWindowAmount, r.Rule)
		assert.Contains(t, r.Detail, "windows[0]")
		assert.Contains(t, r.Detail, "100 wei")
		assert.Contains(t, r.Detail, "fees")
		assert.Contains(t, r.Detail, "3 transactions")
		assert.Contains(t, r.Detail, "1h")
		assert.Contains(t, r.Detail, "the signer")
		r = p.WindowRefusal(RuleWindowCount, 1)
		assert.Equal(t, RuleWindowCount, r.Rule)
		assert.Contains(t, r.Detail, "windows[1]")
		assert.Contains(t, r.Detail, CanonicalAddress(usdc))
		assert.Contains(t, r.Detail, "UTC day")
		assert.Contains(t, r.Detail, "this principal")
		r = p.WindowRefusal(RuleWindowCount, 7)
		assert.Equal(t, RuleWindowCount, r.Rule, "a window the policy no longer has is still named by its rule")
	})
}
