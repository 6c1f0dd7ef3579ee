package stuckpolicy

import (
	"context"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
	"github.com/txfence/txfence/shared/webhook"
)

var (
	signerA = common.HexToAddress("0x00000000000000000000000000000000000000a1")
	signerB = common.HexToAddress("0x00000000000000000000000000000000000000b2")
)

// fakeHook records what it was asked and answers res, err.
type fakeHook struct {
	asked []txm.StuckTx
	res   txm.Resolution
	err   error
}

func (f *fakeHook) Resolve(_ context.Context, t txm.StuckTx) (txm.Resolution, error) {
	f.asked = append(f.asked, t)
	return f.res, f.err
}

func rule(chain uint64, signer *common.Address, action string) config.StuckRule {
	return config.StuckRule{ChainID: chain, Signer: signer, Action: action}
}

func TestIssue10_WebhookStaticMostSpecificRuleWins(t *testing.T) {
	t.Parallel()
	rules := []config.StuckRule{
		rule(0, nil, "bump"),
		rule(1, nil, "cancel"),
		rule(0, &signerA, "placeholder"),
		rule(1, &signerA, "noop"),
	}
	cases := []struct {
		chain  uint64
		signer common.Address
		want   txm.StuckAction
		reason string
	}{
		{1, signerA, txm.ActionNoop, "stuck rule 1:" + signerA.Hex() + "=noop"},
		{2, signerA, txm.ActionPlaceholder, "stuck rule " + signerA.Hex() + "=placeholder"},
		{1, signerB, txm.ActionCancel, "stuck rule 1=cancel"},
		{2, signerB, txm.ActionBump, "stuck rule *=bump"},
	}
	// The order the rules are written in does not matter.
	reversed := slices.Clone(rules)
	slices.Reverse(reversed)
	for _, order := range [][]config.StuckRule{rules, reversed} {
		p, err := New(config.Config{StuckPolicy: order}, nil)
		require.NoError(t, err)
		for _, tc := range cases {
			res, err := p.Resolve(context.Background(), txm.StuckTx{TxID: "t", ChainID: tc.chain, Signer: tc.signer})
			require.NoError(t, err)
			assert.Equal(t, txm.Resolution{Action: tc.want, Reason: tc.reason, By: "static"}, res, "chain %d signer %s", tc.chain, tc.signer.Hex())
		}
	}

	// No rule at all, or none that matches: noop.
	p, err := New(config.Config{StuckPolicy: []config.StuckRule{rule(5, nil, "cancel")}}, nil)
	require.NoError(t, err)
	res, err := p.Resolve(context.Background(), txm.StuckTx{ChainID: 1, Signer: signerA})
	require.NoError(t, err)
	assert.Equal(t, txm.Resolution{Action: txm.ActionNoop, Reason: "no stuck rule matches: default noop", By: "static"}, res)
}

// TestStaticAgreesWithConfig: whatever the rules, the policy's action is
// config.StuckActionFor's and its reason names the rule that won: the first
// of the most specific matching rules.
func TestStaticAgreesWithConfig(t *testing.T) {
	t.Parallel()
	scopes := []config.StuckRule{rule(0, nil, ""), rule(1, nil, ""), rule(2, nil, ""), rule(0, &signerA, ""), rule(1, &signerA, ""), rule(2, &signerB, "")}
	actions := []string{"noop", "bump", "cancel", "placeholder"}
	// Every policy of up to three rules over these scopes and actions.
	var all []config.StuckRule
	for _, s := range scopes {
		for _, a := range actions {
			s.Action = a
			all = append(all, s)
		}
	}
	var policies [][]config.StuckRule
	for i := range all {
		policies = append(policies, []config.StuckRule{all[i]})
		for j := range all {
			policies = append(policies, []config.StuckRule{all[i], all[j]})
			for k := 0; k < len(all); k += 5 {
				policies = append(policies, []config.StuckRule{all[i], all[j], all[k]})
			}
		}
	}
	for _, rules := range policies {
		cfg := config.Config{StuckPolicy: rules}
		p, err := New(cfg, nil)
		require.NoError(t, err)
		for _, chain := range []uint64{1, 2, 3} {
			for _, signer := range []common.Address{signerA, signerB} {
				res, err := p.Resolve(context.Background(), txm.StuckTx{ChainID: chain, Signer: signer})
				require.NoError(t, err)
				want := cfg.StuckActionFor(chain, signer)
				require.Equal(t, want, string(res.Action), "rules %v", rules)
				require.Equal(t, expectedReason(rules, chain, signer), res.Reason, "rules %v", rules)
			}
		}
	}
}

func TestIssue10_WebhookStaticDelegatesToWebhook(t *testing.T) {
	t.Parallel()
	hook := &fakeHook{res: txm.Resolution{Action: txm.ActionCancel, Reason: "ops said so", By: "webhook"}}
	p, err := New(config.Config{StuckPolicy: []config.StuckRule{
		rule(0, nil, "bump"),
		rule(1, nil, config.StuckWebhookAction),
	}}, hook)
	require.NoError(t, err)

	tx := txm.StuckTx{TxID: "t1", ChainID: 1, Signer: signerA, Nonce: 9}
	res, err := p.Resolve(context.Background(), tx)
	require.NoError(t, err)
	assert.Equal(t, hook.res, res)
	assert.Equal(t, []txm.StuckTx{tx}, hook.asked)

	res, err = p.Resolve(context.Background(), txm.StuckTx{TxID: "t2", ChainID: 2, Signer: signerA})
	require.NoError(t, err)
	assert.Equal(t, txm.ActionBump, res.Action)
	assert.Len(t, hook.asked, 1, "other chains are not the webhook's")

	// The webhook's failure is no decision, passed on as it came.
	hook.err = webhook.ErrRefused
	hook.res = txm.Resolution{}
	res, err = p.Resolve(context.Background(), tx)
	require.ErrorIs(t, err, webhook.ErrRefused)
	assert.Equal(t, txm.Resolution{}, res)
}

func TestIssue10_WebhookStaticNew(t *testing.T) {
	t.Parallel()
	_, err := New(config.Config{StuckPolicy: []config.StuckRule{rule(1, &signerA, config.StuckWebhookAction)}}, nil)
	require.Error(t, err, "a webhook rule needs a webhook")
	assert.Contains(t, err.Error(), "1:"+signerA.Hex()+"=webhook")

	_, err = New(config.Config{StuckPolicy: []config.StuckRule{rule(0, nil, "explode")}}, nil)
	require.ErrorIs(t, err, txm.ErrInvalid)

	_, err = New(config.Config{}, nil)
	require.NoError(t, err, "no rules: noop for everything")

	// The rules are copied: changing the config later changes nothing.
	rules := []config.StuckRule{rule(0, nil, "cancel")}
	p, err := New(config.Config{StuckPolicy: rules}, nil)
	require.NoError(t, err)
	rules[0].Action = "bump"
	res, err := p.Resolve(context.Background(), txm.StuckTx{ChainID: 1})
	require.NoError(t, err)
	assert.Equal(t, txm.ActionCancel, res.Action)
}

// TestIssue10_WebhookFromConfig builds the policy as the functions do, and
// asks a real receiver through it.
func TestIssue10_WebhookFromConfig(t *testing.T) {
	t.Parallel()
	const secret = "whsec-test-0123456789"
	srv := httptest.NewServer(webhook.NewReceiver([]byte(secret), func(_ context.Context, r webhook.Request) (webhook.Answer, error) {
		return webhook.Answer{Action: txm.ActionPlaceholder, Reason: "fill nonce " + r.TxID}, nil
	}))
	t.Cleanup(srv.Close)

	cfg := config.Config{
		StuckPolicy:  []config.StuckRule{rule(0, nil, "noop"), rule(0, &signerA, config.StuckWebhookAction)},
		StuckWebhook: config.StuckWebhook{URL: srv.URL + "/stuck?key=k", Secret: secret, Timeout: 2 * time.Second},
	}
	p, err := FromConfig(cfg)
	require.NoError(t, err)
	res, err := p.Resolve(context.Background(), txm.StuckTx{TxID: "t1", ChainID: 1, Signer: signerA})
	require.NoError(t, err)
	assert.Equal(t, txm.Resolution{Action: txm.ActionPlaceholder, Reason: "fill nonce t1", By: "webhook"}, res)
	res, err = p.Resolve(context.Background(), txm.StuckTx{TxID: "t2", ChainID: 1, Signer: signerB})
	require.NoError(t, err)
	assert.Equal(t, "static", res.By)

	// A webhook rule and no URL.
	cfg.StuckWebhook.URL = ""
	_, err = FromConfig(cfg)
	require.Error(t, err)

	// A URL that does not parse is reported without itself.
	cfg.StuckWebhook.URL = "https://hooks.example.com/%zz?key=do-not-print"
	_, err = FromConfig(cfg)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "do-not-print")

	// No webhook rule: the URL is still checked, and unused.
	cfg.StuckPolicy = nil
	cfg.StuckWebhook.URL = srv.URL
	p, err = FromConfig(cfg)
	require.NoError(t, err)
	res, err = p.Resolve(context.Background(), txm.StuckTx{ChainID: 1, Signer: signerA})
	require.NoError(t, err)
	assert.Equal(t, txm.ActionNoop, res.Action)
}

// expectedReason is the reason the policy should give, from the rule order
// of DESIGN and config: chain and signer, then signer, then chain, then
// any; the first written wins a tie.
func expectedReason(rules []config.StuckRule, chain uint64, signer common.Address) string {
	best, bestScore := -1, -1
	for i, r := range rules {
		if r.ChainID != 0 && r.ChainID != chain || r.Signer != nil && *r.Signer != signer {
			continue
		}
		score := map[bool]int{true: 2}[r.Signer != nil] + map[bool]int{true: 1}[r.ChainID != 0]
		if score > bestScore {
			best, bestScore = i, score
		}
	}
	if best < 0 {
		return "no stuck rule matches: default noop"
	}
	return "stuck rule " + ruleName(rules[best])
}
