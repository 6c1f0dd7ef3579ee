package api_test

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/internal/stacktest"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/txm"
)

// windowWorld is a world of API keys without rate limits, so that what
// refuses a burst of creates is the window alone.
func windowWorld(t *testing.T, keys int) *stacktest.World {
	return stacktest.NewWorld(t, keys, func(c *config.Config) {
		c.Auth.Methods = []string{"apikey"}
		c.Auth.RatePerSecond, c.Auth.RateBurst, c.Auth.SignerRatePerSecond = 1e6, 1e6, 1e6
	})
}

// burst sends the creates concurrently, the i-th through urls[i%len(urls)],
// and answers them in order.
func burst(t *testing.T, urls []string, key string, bodies []map[string]any) []simAnswer {
	t.Helper()
	answers := make([]simAnswer, len(bodies))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, body := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = postJSON(t, http.MethodPost, urls[i%len(urls)]+"/v1/transactions", key, body)
		}()
	}
	close(start)
	wg.Wait()
	return answers
}

// TestIssue47_RollingWindow: 50 concurrent creates over two instances (two
// API servers, each with its own pool and lease owner, one database)
// against a window of 10 tokens: exactly the ones that fit are accepted,
// each refused one is 403 naming the window's rule, and the rows and the
// usage in the database are the accepted ones. First a signer's window,
// with creates of one token each (exactly 10 accepted); then a principal's
// window over two signers, with creates of 1 to 3 tokens (what was accepted
// sums to at most 10, and no refused one would have fitted beside it).
func TestIssue47_RollingWindow(t *testing.T) {
	w := windowWorld(t, 3)
	ctx := context.Background()
	s1, s2, deployer := w.Keys[0].Address, w.Keys[1].Address, w.Keys[2]
	to := common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	erc20 := evmtest.ERC20()
	token := w.Chain.MustDeploy(t, deployer, erc20, "Test", "TST", s1, big.NewInt(1_000_000))
	_, err := w.Chain.Transact(ctx, deployer.Key, &token, nil, pack(t, erc20, "mint", s2, big.NewInt(1_000_000)))
	require.NoError(t, err)
	urls := []string{w.Node(t, "a").APIURL, w.Node(t, "b").APIURL}
	transfer := func(from common.Address, amount int64) map[string]any {
		return map[string]any{"chainId": evmtest.ChainID, "from": from, "to": token,
			"data": hexData(pack(t, erc20, "transfer", to, big.NewInt(amount)))}
	}
	// sorted reads an answer: its amount when accepted, or its refusal's rule.
	type verdicts struct {
		accepted, refused []int64
	}
	judge := func(answers []simAnswer, amounts []int64) verdicts {
		t.Helper()
		var v verdicts
		for i, a := range answers {
			switch a.status {
			case http.StatusAccepted:
				v.accepted = append(v.accepted, amounts[i])
			case http.StatusForbidden:
				assert.Equal(t, txm.RuleWindowAmount, a.body["rule"], "%v", a.body)
				assert.Contains(t, a.body["detail"], "windows[0]", "the refusal names the window")
				v.refused = append(v.refused, amounts[i])
			default:
				t.Fatalf("create %d: %d %v", i, a.status, a.body)
			}
		}
		return v
	}
	sum := func(xs []int64) (s int64) {
		for _, x := range xs {
			s += x
		}
		return s
	}
	usage := func(key string) (count int, amount int64) {
		t.Helper()
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT coalesce(sum(tx_count), 0), coalesce(sum(amount), 0)::bigint
FROM window_usage WHERE key = $1`, key).Scan(&count, &amount))
		return count, amount
	}
	const n = 50

	t.Run("signer", func(t *testing.T) {
		key := w.APIKey(t, txm.Policy{Principal: "desk", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
			Signers: []common.Address{s1},
			Windows: []txm.Window{{Scope: txm.WindowSigner, Token: token, ChainID: evmtest.ChainID, Period: time.Hour,
				MaxAmount: big.NewInt(10)}}})
		bodies, amounts := make([]map[string]any, n), make([]int64, n)
		for i := range bodies {
			bodies[i], amounts[i] = transfer(s1, 1), 1
		}
		v := judge(burst(t, urls, key, bodies), amounts)
		assert.Len(t, v.accepted, 10, "exactly the creates that fit in the window are accepted")
		assert.Len(t, v.refused, n-10)
		assert.Equal(t, 10, managedRows(t, w, s1), "a row per accepted create, none for a refused one")
		count, amount := usage("s/" + fmt.Sprint(evmtest.ChainID) + "/" + txm.CanonicalAddress(s1) + "/" + txm.CanonicalAddress(token))
		assert.Equal(t, 10, count)
		assert.EqualValues(t, 10, amount)
		var nonces []int64
		rows, err := w.DB.Pool.Query(ctx, `SELECT nonce FROM managed_tx WHERE signer = $1 ORDER BY nonce`, txm.CanonicalAddress(s1))
		require.NoError(t, err)
		for rows.Next() {
			var nonce int64
			require.NoError(t, rows.Scan(&nonce))
			nonces = append(nonces, nonce)
		}
		require.NoError(t, rows.Err())
		assert.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, nonces, "refusals take no nonce")
	})

	t.Run("principal", func(t *testing.T) {
		key := w.APIKey(t, txm.Policy{Principal: "fund", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
			Signers: []common.Address{s1, s2},
			Windows: []txm.Window{{Scope: txm.WindowPrincipal, Token: token, ChainID: evmtest.ChainID, Day: true,
				MaxAmount: big.NewInt(10)}}})
		// s1's creates through one instance, s2's through the other: no
		// lease row is shared, so the principal's window alone keeps them
		// apart.
		bodies, amounts := make([]map[string]any, n), make([]int64, n)
		for i := range bodies {
			from := s1
			if i%2 == 1 {
				from = s2
			}
			amounts[i] = int64(1 + i%7%3)
			bodies[i] = transfer(from, amounts[i])
		}
		v := judge(burst(t, urls, key, bodies), amounts)
		accepted := sum(v.accepted)
		t.Logf("accepted %v, refused %d", v.accepted, len(v.refused))
		assert.LessOrEqual(t, accepted, int64(10), "what was accepted fits in the window: %v", v.accepted)
		for _, r := range v.refused {
			assert.Greater(t, accepted+r, int64(10), "a refused create would not have fitted beside the accepted ones: %v", v)
		}
		assert.NotEmpty(t, v.refused)
		var rows int
		require.NoError(t, w.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE principal = 'fund'`).Scan(&rows))
		assert.Equal(t, len(v.accepted), rows, "a row per accepted create, over both signers")
		count, amount := usage("p/" + fmt.Sprint(evmtest.ChainID) + "/fund/" + txm.CanonicalAddress(token))
		assert.Equal(t, len(v.accepted), count)
		assert.Equal(t, accepted, amount)
	})
}

// TestIssue47_WindowFeesCount: a native window counts each create's
// worst-case cost, its value and its gas at the fee ceiling, so fees count:
// a value that fits alone but not with its fees is refused (window_amount);
// one that fits with its fees is accepted, and takes the window's last wei.
func TestIssue47_WindowFeesCount(t *testing.T) {
	w := windowWorld(t, 1)
	from := w.Keys[0].Address
	const gas = 21000
	ceiling := big.NewInt(1_000_000_000) // the policy's maxFeePerGas: 1 gwei
	fees := new(big.Int).Mul(big.NewInt(gas), ceiling)
	window := big.NewInt(1_000_000_000_000_000) // 0.001 ether
	key := w.APIKey(t, txm.Policy{Principal: "ops", Roles: []txm.Role{txm.RoleSender, txm.RoleReader},
		Signers: []common.Address{from}, MaxFeePerGas: ceiling,
		Windows: []txm.Window{{Scope: txm.WindowPrincipal, Period: time.Hour, MaxAmount: window}}})
	url := w.Node(t, "a").APIURL + "/v1/transactions"
	send := func(value *big.Int) simAnswer {
		return postJSON(t, http.MethodPost, url, key, map[string]any{"chainId": evmtest.ChainID, "from": from,
			"to": stacktest.Dead, "value": value.String(), "gasLimit": gas})
	}

	// The value alone fits (it is a wei under the window), not with fees.
	tooMuch := send(new(big.Int).Sub(window, big.NewInt(1)))
	require.Equal(t, http.StatusForbidden, tooMuch.status, "%v", tooMuch.body)
	assert.Equal(t, txm.RuleWindowAmount, tooMuch.body["rule"])
	assert.Contains(t, tooMuch.body["detail"], "fees")
	assert.Zero(t, managedRows(t, w, from), "a refusal writes nothing")

	fits := send(new(big.Int).Sub(window, fees))
	require.Equal(t, http.StatusAccepted, fits.status, "value and fees fill the window exactly: %v", fits.body)

	// Nothing is left, not even for the fees of a transfer of nothing.
	empty := send(new(big.Int))
	require.Equal(t, http.StatusForbidden, empty.status, "%v", empty.body)
	assert.Equal(t, txm.RuleWindowAmount, empty.body["rule"])
	assert.Equal(t, 1, managedRows(t, w, from))
}

// TestWindowPolicy_PutAndRead: an admin writes a policy's windows through
// the API and reads them back as written; a bad window is 422 naming its
// field, and changes nothing.
func TestWindowPolicy_PutAndRead(t *testing.T) {
	w := windowWorld(t, 1)
	signer := w.Keys[0].Address
	admin := w.APIKey(t, txm.Policy{Principal: "root", Roles: []txm.Role{txm.RoleAdmin}, AllSigners: true})
	url := w.Node(t, "a").APIURL + "/v1/principals/svc/policy"
	window := map[string]any{"scope": "principal", "asset": "native", "period": "7d", "maxAmount": "5", "maxCount": 2}
	good := map[string]any{"roles": []string{"sender"}, "signers": []string{signer.Hex()}, "windows": []any{window}}
	put := postJSON(t, http.MethodPut, url, admin, good)
	require.Equal(t, http.StatusOK, put.status, "%v", put.body)
	got := postJSON(t, http.MethodGet, url, admin, nil)
	require.Equal(t, http.StatusOK, got.status, "%v", got.body)
	assert.Equal(t, []any{map[string]any{"scope": "principal", "asset": "native", "period": "7d", "maxAmount": "5",
		"maxCount": float64(2)}}, got.body["windows"])

	bad := map[string]any{"roles": []string{"sender"}, "signers": []string{signer.Hex()},
		"windows": []any{map[string]any{"scope": "signer", "asset": "native", "period": "45d", "maxCount": 1}}}
	refused := postJSON(t, http.MethodPut, url, admin, bad)
	require.Equal(t, http.StatusUnprocessableEntity, refused.status, "%v", refused.body)
	errs, _ := refused.body["errors"].([]any)
	require.Len(t, errs, 1, "%v", refused.body)
	assert.Equal(t, "windows[0].period", errs[0].(map[string]any)["field"])
	got = postJSON(t, http.MethodGet, url, admin, nil)
	assert.EqualValues(t, 1, got.body["version"], "a refused policy writes nothing")
}
