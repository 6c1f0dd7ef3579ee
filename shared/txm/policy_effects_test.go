package txm

import (
	"encoding/json"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIssue47_EffectPolicies: the policy rules on what a transaction moves
// or allows (per-token caps and protected tokens, the token recipient and
// spender allowlists, no unlimited approvals) judge the simulated effects
// of the signer's own transfers and approvals only, name the rule they
// refuse by, and are read from and written to the policy's JSON form with a
// clear error for a bad rule.
func TestIssue47_EffectPolicies(t *testing.T) {
	t.Parallel()
	var (
		signer    = common.HexToAddress("0x00000000000000000000000000000000000051A1")
		other     = common.HexToAddress("0x0000000000000000000000000000000000000070")
		allowed   = common.HexToAddress("0x00000000000000000000000000000000000000A1")
		stranger  = common.HexToAddress("0x00000000000000000000000000000000000000E1")
		usdc      = common.HexToAddress("0x00000000000000000000000000000000000020C0") // ERC-20 with a cap
		dai       = common.HexToAddress("0x00000000000000000000000000000000000020D0") // ERC-20, no rule
		vault     = common.HexToAddress("0x00000000000000000000000000000000000020F0") // ERC-20, protected
		punks     = common.HexToAddress("0x0000000000000000000000000000000000000721") // ERC-721 with a cap
		relics    = common.HexToAddress("0x0000000000000000000000000000000000007210") // ERC-721, protected
		items     = common.HexToAddress("0x0000000000000000000000000000000000001155") // ERC-1155 with a cap
		zero      common.Address
		maxUint   = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
		half      = new(big.Int).Lsh(big.NewInt(1), 255)
		belowHalf = new(big.Int).Sub(half, big.NewInt(1))
	)
	const chain = 1
	n := big.NewInt
	erc20 := func(token, from, to common.Address, amount *big.Int) Effect {
		return Effect{Kind: EffectERC20Transfer, Token: token, From: from, To: to, Amount: amount}
	}
	approve := func(token, owner, spender common.Address, amount *big.Int) Effect {
		return Effect{Kind: EffectERC20Approval, Token: token, From: owner, To: spender, Amount: amount}
	}
	nft := func(token, from, to common.Address, id int64) Effect {
		return Effect{Kind: EffectERC721Transfer, Token: token, From: from, To: to, Amount: n(1), TokenID: n(id)}
	}
	nftApprove := func(token, owner, spender common.Address, id int64) Effect {
		return Effect{Kind: EffectERC721Approval, Token: token, From: owner, To: spender, Amount: n(1), TokenID: n(id)}
	}
	forAll := func(token, owner, operator common.Address, granted bool) Effect {
		a := n(0)
		if granted {
			a = n(1)
		}
		return Effect{Kind: EffectApprovalForAll, Token: token, From: owner, To: operator, Amount: a}
	}
	multi := func(token, from, to common.Address, id, amount int64) Effect {
		return Effect{Kind: EffectERC1155Transfer, Token: token, From: from, To: to, Amount: n(amount), TokenID: n(id)}
	}
	native := func(from, to common.Address, wei int64) Effect {
		return Effect{Kind: EffectNative, From: from, To: to, Amount: n(wei)}
	}

	caps := Policy{Tokens: []TokenRule{
		{ChainID: chain, Token: usdc, MaxPerTx: n(100)},
		{ChainID: chain, Token: punks, MaxPerTx: n(2)},
		{ChainID: chain, Token: items, MaxPerTx: n(10)},
		{ChainID: chain, Token: vault, Protected: true},
		{ChainID: chain, Token: relics, Protected: true},
	}}
	recipients := Policy{TokenRecipients: []common.Address{allowed}}
	noRecipient := Policy{TokenRecipients: []common.Address{}}
	spenders := Policy{Spenders: []common.Address{allowed}}
	noUnlimited := Policy{NoUnlimitedApprovals: true}

	t.Run("check", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name    string
			policy  Policy
			chain   uint64
			effects []Effect
			rule    string // "": allowed
			token   common.Address
		}{
			// tokens.maxPerTx: both sides, sums across logs, per token and chain.
			{"erc20 at the cap", caps, chain, []Effect{erc20(usdc, signer, stranger, n(100))}, "", zero},
			{"erc20 above the cap", caps, chain, []Effect{erc20(usdc, signer, stranger, n(101))}, RuleTokenMaxPerTx, usdc},
			{"two logs that fit together", caps, chain,
				[]Effect{erc20(usdc, signer, stranger, n(60)), erc20(usdc, signer, allowed, n(40))}, "", zero},
			{"two logs that pass the cap together", caps, chain,
				[]Effect{erc20(usdc, signer, stranger, n(60)), erc20(usdc, signer, allowed, n(41))}, RuleTokenMaxPerTx, usdc},
			{"a cap counts its own token only", caps, chain,
				[]Effect{erc20(usdc, signer, stranger, n(60)), erc20(dai, signer, stranger, n(1000)), erc20(usdc, signer, stranger, n(40))}, "", zero},
			{"a token without a rule is not capped", caps, chain, []Effect{erc20(dai, signer, stranger, maxUint)}, "", zero},
			{"a rule of another chain does not apply", caps, 5, []Effect{erc20(usdc, signer, stranger, n(101)), erc20(vault, signer, stranger, n(1))}, "", zero},
			{"transfers between others do not count", caps, chain,
				[]Effect{erc20(usdc, signer, stranger, n(60)), erc20(usdc, other, stranger, n(1000)), erc20(usdc, stranger, other, n(1000))}, "", zero},
			{"what the signer receives does not count", caps, chain,
				[]Effect{erc20(usdc, other, signer, n(1000)), erc20(usdc, zero, signer, n(1000)), erc20(usdc, signer, stranger, n(100))}, "", zero},
			{"erc721 count at the cap", caps, chain, []Effect{nft(punks, signer, stranger, 1), nft(punks, signer, stranger, 2)}, "", zero},
			{"erc721 count above the cap", caps, chain,
				[]Effect{nft(punks, signer, stranger, 1), nft(punks, signer, stranger, 2), nft(punks, signer, stranger, 3)}, RuleTokenMaxPerTx, punks},
			{"erc1155 ids add up to the cap", caps, chain, []Effect{multi(items, signer, stranger, 1, 6), multi(items, signer, stranger, 2, 4)}, "", zero},
			{"erc1155 ids add up past the cap", caps, chain,
				[]Effect{multi(items, signer, stranger, 1, 6), multi(items, signer, stranger, 2, 5)}, RuleTokenMaxPerTx, items},
			{"native value is left to the value caps", caps, chain, []Effect{native(signer, stranger, 1_000_000)}, "", zero},

			// tokens.protected: nothing leaves, nothing is approved, a revocation is allowed.
			{"a protected token leaves", caps, chain, []Effect{erc20(vault, signer, stranger, n(1))}, RuleTokenProtected, vault},
			{"a protected nft leaves", caps, chain, []Effect{nft(relics, signer, allowed, 7)}, RuleTokenProtected, relics},
			{"a protected token approved", caps, chain, []Effect{approve(vault, signer, allowed, n(1))}, RuleTokenProtected, vault},
			{"a protected nft approved", caps, chain, []Effect{nftApprove(relics, signer, allowed, 7)}, RuleTokenProtected, relics},
			{"a protected collection's operator", caps, chain, []Effect{forAll(relics, signer, allowed, true)}, RuleTokenProtected, relics},
			{"a protected token's allowance revoked", caps, chain,
				[]Effect{approve(vault, signer, stranger, n(0)), nftApprove(relics, signer, zero, 7), forAll(relics, signer, stranger, false)}, "", zero},
			{"a protected token received or moved by others", caps, chain,
				[]Effect{erc20(vault, other, signer, n(5)), erc20(vault, other, stranger, n(5)), approve(vault, other, stranger, maxUint)}, "", zero},

			// tokenRecipients: every token transfer from the signer, whatever the transaction's to.
			{"erc20 to a listed recipient", recipients, chain, []Effect{erc20(dai, signer, allowed, n(5))}, "", zero},
			{"erc20 to an unlisted recipient", recipients, chain, []Effect{erc20(dai, signer, stranger, n(5))}, RuleTokenRecipients, dai},
			{"erc721 to an unlisted recipient", recipients, chain, []Effect{nft(punks, signer, stranger, 1)}, RuleTokenRecipients, punks},
			{"erc1155 to an unlisted recipient", recipients, chain, []Effect{multi(items, signer, stranger, 1, 1)}, RuleTokenRecipients, items},
			{"a burn's recipient is the zero address", recipients, chain, []Effect{erc20(dai, signer, zero, n(5))}, RuleTokenRecipients, dai},
			{"the second transfer is unlisted", recipients, chain,
				[]Effect{erc20(dai, signer, allowed, n(5)), erc20(usdc, signer, stranger, n(5))}, RuleTokenRecipients, usdc},
			{"native value to anyone", recipients, chain, []Effect{native(signer, stranger, 5)}, "", zero},
			{"others' transfers to anyone", recipients, chain, []Effect{erc20(dai, other, stranger, n(5)), erc20(dai, stranger, signer, n(5))}, "", zero},
			{"an approval is not a transfer", recipients, chain, []Effect{approve(dai, signer, stranger, n(5))}, "", zero},
			{"an empty recipient list", noRecipient, chain, []Effect{erc20(dai, signer, allowed, n(1))}, RuleTokenRecipients, dai},

			// spenders: every approval the signer grants.
			{"erc20 approval to a listed spender", spenders, chain, []Effect{approve(dai, signer, allowed, maxUint)}, "", zero},
			{"erc20 approval to an unlisted spender", spenders, chain, []Effect{approve(dai, signer, stranger, n(1))}, RuleSpenders, dai},
			{"erc721 approval to an unlisted spender", spenders, chain, []Effect{nftApprove(punks, signer, stranger, 1)}, RuleSpenders, punks},
			{"operator for all unlisted", spenders, chain, []Effect{forAll(items, signer, stranger, true)}, RuleSpenders, items},
			{"revocations of unlisted spenders", spenders, chain,
				[]Effect{approve(dai, signer, stranger, n(0)), nftApprove(punks, signer, zero, 1), forAll(items, signer, stranger, false)}, "", zero},
			{"another owner's approval", spenders, chain, []Effect{approve(dai, other, stranger, n(1)), forAll(items, other, stranger, true)}, "", zero},
			{"a transfer is not an approval", spenders, chain, []Effect{erc20(dai, signer, stranger, n(1))}, "", zero},

			// noUnlimitedApprovals: 2^255 and above, operator for all.
			{"allowance of 2^256-1", noUnlimited, chain, []Effect{approve(dai, signer, allowed, maxUint)}, RuleUnlimitedApprovals, dai},
			{"allowance of 2^255", noUnlimited, chain, []Effect{approve(dai, signer, allowed, half)}, RuleUnlimitedApprovals, dai},
			{"allowance just below 2^255", noUnlimited, chain, []Effect{approve(dai, signer, allowed, belowHalf)}, "", zero},
			{"operator for all granted", noUnlimited, chain, []Effect{forAll(punks, signer, allowed, true)}, RuleUnlimitedApprovals, punks},
			{"operator for all revoked", noUnlimited, chain, []Effect{forAll(punks, signer, allowed, false)}, "", zero},
			{"one nft approved", noUnlimited, chain, []Effect{nftApprove(punks, signer, allowed, 1)}, "", zero},
			{"another owner's unlimited allowance", noUnlimited, chain, []Effect{approve(dai, other, allowed, maxUint)}, "", zero},
			{"unlimited allowed without the rule", spenders, chain, []Effect{approve(dai, signer, allowed, maxUint), forAll(punks, signer, allowed, true)}, "", zero},

			// No rule on effects: today's behaviour.
			{"no rules", Policy{}, chain,
				[]Effect{erc20(vault, signer, stranger, maxUint), approve(dai, signer, stranger, maxUint), forAll(punks, signer, stranger, true)}, "", zero},
			{"no effects", caps, chain, nil, "", zero},
		}
		for _, tt := range tests {
			err := tt.policy.CheckEffects(tt.chain, signer, tt.effects)
			if tt.rule == "" {
				assert.NoError(t, err, tt.name)
				continue
			}
			var r *Refusal
			if !assert.True(t, errors.As(err, &r), "%s: want a refusal by %s, got %v", tt.name, tt.rule, err) {
				continue
			}
			assert.Equal(t, tt.rule, r.Rule, "%s: %v", tt.name, err)
			assert.ErrorIs(t, err, ErrForbidden, tt.name)
			assert.Contains(t, r.Detail, CanonicalAddress(tt.token), "%s: the refusal names the token", tt.name)
		}
	})

	t.Run("simulation", func(t *testing.T) {
		t.Parallel()
		over := []Effect{erc20(usdc, signer, stranger, n(101))}
		under := []Effect{erc20(usdc, signer, stranger, n(100))}
		for _, tt := range []struct {
			name   string
			policy Policy
			result SimResult
			rule   string
		}{
			{"simulateV1 under the cap", caps, SimResult{Method: SimSimulateV1, Effects: under}, ""},
			{"simulateV1 over the cap", caps, SimResult{Method: SimSimulateV1, Effects: over}, RuleTokenMaxPerTx},
			{"call+estimate cannot show tokens", caps, SimResult{Method: SimCallEstimate, Effects: []Effect{native(signer, stranger, 1)}}, RuleEffectsUnknown},
			{"call+estimate under a spender rule", spenders, SimResult{Method: SimCallEstimate}, RuleEffectsUnknown},
			{"call+estimate without rules on effects", Policy{}, SimResult{Method: SimCallEstimate}, ""},
			{"no simulation needed: a plain transfer", caps, SimResult{Effects: []Effect{native(signer, stranger, 1)}}, ""},
		} {
			err := tt.policy.CheckSimulation(chain, signer, tt.result)
			if tt.rule == "" {
				assert.NoError(t, err, tt.name)
				continue
			}
			var r *Refusal
			if assert.True(t, errors.As(err, &r), "%s: want a refusal by %s, got %v", tt.name, tt.rule, err) {
				assert.Equal(t, tt.rule, r.Rule, tt.name)
			}
		}
	})

	t.Run("format", func(t *testing.T) {
		t.Parallel()
		full := `{"principal":"payments","roles":["sender"],` +
			`"tokens":[{"chainId":1,"token":"0x00000000000000000000000000000000000020c0","maxPerTx":"100"},` +
			`{"chainId":1,"token":"0x00000000000000000000000000000000000020f0","protected":true},` +
			`{"chainId":5,"token":"0x00000000000000000000000000000000000020c0","maxPerTx":"0"}],` +
			`"tokenRecipients":["0x00000000000000000000000000000000000000a1"],` +
			`"spenders":[],"noUnlimitedApprovals":true}`
		var p Policy
		require.NoError(t, json.Unmarshal([]byte(full), &p))
		require.NoError(t, p.Validate())
		assert.Equal(t, []TokenRule{
			{ChainID: 1, Token: usdc, MaxPerTx: n(100)},
			{ChainID: 1, Token: vault, Protected: true},
			{ChainID: 5, Token: usdc, MaxPerTx: n(0)},
		}, p.Tokens)
		assert.Equal(t, []common.Address{allowed}, p.TokenRecipients)
		assert.Equal(t, []common.Address{}, p.Spenders, "[] is an empty list: no spender")
		assert.True(t, p.NoUnlimitedApprovals)
		assert.True(t, p.HasEffectRules())
		b, err := json.Marshal(p)
		require.NoError(t, err)
		assert.Equal(t, full, string(b), "the wire form round-trips")

		// Mixed-case addresses are read as any address is.
		var checksummed Policy
		require.NoError(t, json.Unmarshal([]byte(`{"principal":"p","roles":["sender"],"tokens":[{"chainId":1,"token":"0x00000000000000000000000000000000000020C0","maxPerTx":"1"}]}`), &checksummed))
		assert.Equal(t, usdc, checksummed.Tokens[0].Token)

		var bare Policy
		require.NoError(t, json.Unmarshal([]byte(`{"principal":"p","roles":["sender"]}`), &bare))
		assert.Nil(t, bare.Tokens)
		assert.Nil(t, bare.TokenRecipients, "absent: any recipient")
		assert.Nil(t, bare.Spenders, "absent: any spender")
		assert.False(t, bare.HasEffectRules())
		b, err = json.Marshal(bare)
		require.NoError(t, err)
		assert.JSONEq(t, `{"principal":"p","roles":["sender"]}`, string(b), "absent rules stay absent")

		rule := func(r string) string { return `{"principal":"p","roles":["sender"],"tokens":[` + r + `]}` }
		const tok = `"token":"0x00000000000000000000000000000000000020c0"`
		for _, c := range []struct {
			name, body, field string
		}{
			{"bad token address", rule(`{"chainId":1,"token":"0x20c0","maxPerTx":"1"}`), "tokens[0].token"},
			{"too long a token address", rule(`{"chainId":1,"token":"0x00000000000000000000000000000000000020c0abcd","maxPerTx":"1"}`), "tokens[0].token"},
			{"missing token", rule(`{"chainId":1,"maxPerTx":"1"}`), "tokens[0].token"},
			{"zero token", rule(`{"chainId":1,"token":"0x0000000000000000000000000000000000000000","maxPerTx":"1"}`), "tokens[0].token"},
			{"missing chain", rule(`{` + tok + `,"maxPerTx":"1"}`), "tokens[0].chainId"},
			{"negative cap", rule(`{"chainId":1,` + tok + `,"maxPerTx":"-1"}`), "tokens[0].maxPerTx"},
			{"fractional cap", rule(`{"chainId":1,` + tok + `,"maxPerTx":"1.5"}`), "tokens[0].maxPerTx"},
			{"hex cap", rule(`{"chainId":1,` + tok + `,"maxPerTx":"0x10"}`), "tokens[0].maxPerTx"},
			{"words cap", rule(`{"chainId":1,` + tok + `,"maxPerTx":"ten"}`), "tokens[0].maxPerTx"},
			{"a rule that limits nothing", rule(`{"chainId":1,` + tok + `}`), "tokens[0]"},
			{"cap and protected", rule(`{"chainId":1,` + tok + `,"maxPerTx":"1","protected":true}`), "tokens[0]"},
			{"duplicate rule", rule(`{"chainId":1,` + tok + `,"maxPerTx":"1"},{"chainId":1,"token":"0x00000000000000000000000000000000000020C0","protected":true}`), "tokens[1]"},
			{"bad recipient", `{"principal":"p","roles":["sender"],"tokenRecipients":["0x00000000000000000000000000000000000000a1","bob"]}`, "tokenRecipients[1]"},
			{"bad spender", `{"principal":"p","roles":["sender"],"spenders":["0xZZ000000000000000000000000000000000000a1"]}`, "spenders[0]"},
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
			assert.Equal(t, []string{c.field}, fields, "%s: %v", c.name, err)
		}

		// The same token on two chains is two rules, not a duplicate.
		var twoChains Policy
		require.NoError(t, json.Unmarshal([]byte(rule(`{"chainId":1,`+tok+`,"maxPerTx":"1"},{"chainId":2,`+tok+`,"maxPerTx":"1"}`)), &twoChains))
		assert.NoError(t, twoChains.Validate())

		// A chain id that is not a number is malformed JSON for the policy.
		var quoted Policy
		assert.ErrorIs(t, json.Unmarshal([]byte(rule(`{"chainId":"1",`+tok+`,"maxPerTx":"1"}`)), &quoted), ErrInvalid)
	})
}
