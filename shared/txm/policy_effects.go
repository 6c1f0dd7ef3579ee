package txm

import (
	"fmt"
	"math/big"
	"slices"

	"github.com/ethereum/go-ethereum/common"
)

// TokenRule bounds what a transaction moves of one token (an ERC-20,
// ERC-721 or ERC-1155 contract) on one chain out of its signer. Its
// amounts are token units as the token's events give them: the smallest
// unit of an ERC-20, a count of tokens for an ERC-721, and the units of
// every id together for an ERC-1155. Rolling windows per token are the
// policy's Windows.
type TokenRule struct {
	ChainID uint64
	Token   common.Address
	// MaxPerTx caps what one transaction moves of the token out of the
	// signer, summed over all its transfers (nil: no cap).
	MaxPerTx *big.Int
	// Protected means nothing of the token may leave the signer, and the
	// signer may grant no approval of it (revoking one is allowed).
	Protected bool
}

// UnlimitedAllowance is the smallest ERC-20 allowance NoUnlimitedApprovals
// refuses: 2^255. It catches the customary 2^256-1 and the variants near it
// (2^256-1 minus what was spent, half of it), none of which is a finite
// budget anyone means.
var UnlimitedAllowance = new(big.Int).Lsh(big.NewInt(1), 255)

// HasEffectRules reports whether any rule of the policy judges a
// transaction's token effects (a token's window counts them): without one,
// CheckEffects passes anything.
func (p Policy) HasEffectRules() bool {
	return len(p.Tokens) > 0 || p.TokenRecipients != nil || p.Spenders != nil || p.NoUnlimitedApprovals || p.hasTokenWindows()
}

// TokenRuleFor is the rule for token on chainID, if the policy has one.
func (p Policy) TokenRuleFor(chainID uint64, token common.Address) (TokenRule, bool) {
	for _, r := range p.Tokens {
		if r.ChainID == chainID && r.Token == token {
			return r, true
		}
	}
	return TokenRule{}, false
}

// CheckEffects returns a *Refusal naming the first rule the transaction's
// effects break, in the order the effects happen (a cap on the transfer
// that takes the sum past it), or nil. Only what leaves the signer or what
// the signer allows counts: token transfers whose From is the signer and
// approvals whose owner is; transfers between others, mints to the signer
// and native value (which MaxValue, Hourly and Daily cap with the fees)
// are not judged here. Revoking an approval is always allowed.
func (p Policy) CheckEffects(chainID uint64, signer common.Address, effects []Effect) error {
	if !p.HasEffectRules() {
		return nil
	}
	moved := map[common.Address]*big.Int{} // token → units out of the signer so far
	for _, e := range effects {
		if e.From != signer {
			continue
		}
		rule, ruled := p.TokenRuleFor(chainID, e.Token)
		switch e.Kind {
		case EffectERC20Transfer, EffectERC721Transfer, EffectERC1155Transfer:
			if ruled && rule.Protected {
				return &Refusal{Rule: RuleTokenProtected, Detail: fmt.Sprintf(
					"token %s is protected on chain %d: nothing of it may leave the signer", CanonicalAddress(e.Token), chainID)}
			}
			if p.TokenRecipients != nil && !slices.Contains(p.TokenRecipients, e.To) {
				return &Refusal{Rule: RuleTokenRecipients, Detail: fmt.Sprintf(
					"%s would receive token %s and is not on the token recipient allowlist", CanonicalAddress(e.To), CanonicalAddress(e.Token))}
			}
			if ruled && rule.MaxPerTx != nil {
				sum, ok := moved[e.Token]
				if !ok {
					sum = new(big.Int)
					moved[e.Token] = sum
				}
				sum.Add(sum, amountOf(e))
				if sum.Cmp(rule.MaxPerTx) > 0 {
					return &Refusal{Rule: RuleTokenMaxPerTx, Detail: fmt.Sprintf(
						"the transaction moves %s units of token %s out of the signer, above the per-transaction cap of %s on chain %d",
						sum, CanonicalAddress(e.Token), rule.MaxPerTx, chainID)}
				}
			}
		case EffectERC20Approval, EffectERC721Approval, EffectApprovalForAll:
			if revokes(e) {
				continue
			}
			if ruled && rule.Protected {
				return &Refusal{Rule: RuleTokenProtected, Detail: fmt.Sprintf(
					"token %s is protected on chain %d: the signer may approve none of it", CanonicalAddress(e.Token), chainID)}
			}
			if p.Spenders != nil && !slices.Contains(p.Spenders, e.To) {
				return &Refusal{Rule: RuleSpenders, Detail: fmt.Sprintf(
					"%s would be approved to spend token %s and is not on the spender allowlist", CanonicalAddress(e.To), CanonicalAddress(e.Token))}
			}
			if p.NoUnlimitedApprovals && unlimited(e) {
				return &Refusal{Rule: RuleUnlimitedApprovals, Detail: fmt.Sprintf(
					"the transaction grants %s an unlimited approval of token %s", CanonicalAddress(e.To), CanonicalAddress(e.Token))}
			}
		}
	}
	return nil
}

// CheckSimulation is CheckEffects on what a simulation showed. Where the
// node could not show token effects (SimCallEstimate sees the top-level
// value only) and the policy has rules on them, it refuses by
// RuleEffectsUnknown: those rules fail closed rather than pass what they
// cannot see. A result without a method stands for a call that needed no
// simulation (no data, to an address without code), which moves no token.
// A simulation that failed shows no effects and is not judged here (a
// revert is refused for what it is).
func (p Policy) CheckSimulation(chainID uint64, signer common.Address, r SimResult) error {
	if r.Reverted || r.Err != nil {
		return nil
	}
	if r.Method == SimCallEstimate && p.HasEffectRules() {
		return &Refusal{Rule: RuleEffectsUnknown, Detail: fmt.Sprintf(
			"the policy judges token transfers and approvals, and the node of chain %d cannot show them (it does not serve eth_simulateV1)", chainID)}
	}
	return p.CheckEffects(chainID, signer, r.Effects)
}

// revokes reports whether an approval effect takes a right away rather
// than grants one: an allowance of 0, an ERC-721 approval cleared to the
// zero address, an operator-for-all revoked.
func revokes(e Effect) bool {
	switch e.Kind {
	case EffectERC20Approval, EffectApprovalForAll:
		return amountOf(e).Sign() == 0
	case EffectERC721Approval:
		return e.To == (common.Address{})
	}
	return false
}

// unlimited reports whether an approval effect lets its spender take
// without bound: an ERC-20 allowance of UnlimitedAllowance or more, or an
// operator for all of a collection.
func unlimited(e Effect) bool {
	switch e.Kind {
	case EffectERC20Approval:
		return amountOf(e).Cmp(UnlimitedAllowance) >= 0
	case EffectApprovalForAll:
		return amountOf(e).Sign() != 0
	}
	return false
}

func amountOf(e Effect) *big.Int {
	if e.Amount == nil {
		return new(big.Int)
	}
	return e.Amount
}

// validateTokens checks the token rules: each names a chain and a token,
// limits something, and is the only one of its token and chain.
func (p Policy) validateTokens(v *ValidationError) {
	type key struct {
		chain uint64
		token common.Address
	}
	seen := map[key]int{}
	for i, r := range p.Tokens {
		field := fmt.Sprintf("tokens[%d]", i)
		if r.ChainID == 0 {
			v.Add(field+".chainId", "is required: the chain the token is on")
		}
		if r.Token == (common.Address{}) {
			v.Add(field+".token", "is required (native value is capped by maxValue, hourly and daily)")
		}
		switch {
		case r.MaxPerTx != nil && r.MaxPerTx.Sign() < 0:
			v.Add(field+".maxPerTx", "must not be negative")
		case r.MaxPerTx == nil && !r.Protected:
			v.Add(field, "limits nothing: give maxPerTx or protected")
		case r.MaxPerTx != nil && r.Protected:
			v.Add(field, "a protected token moves nothing: give maxPerTx or protected, not both")
		}
		k := key{r.ChainID, r.Token}
		if j, dup := seen[k]; dup {
			v.Add(field, "a second rule for token %s on chain %d (tokens[%d]): give one rule per token and chain",
				CanonicalAddress(r.Token), r.ChainID, j)
			continue
		}
		seen[k] = i
	}
}
