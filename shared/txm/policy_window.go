package txm

import (
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// WindowScope says whose sends a window counts.
type WindowScope string

const (
	// WindowSigner counts everything the signer sends, whoever created it,
	// and applies when the policy's principal creates.
	WindowSigner WindowScope = "signer"
	// WindowPrincipal counts what the policy's principal sends, from every
	// signer (of one chain, in one database).
	WindowPrincipal WindowScope = "principal"
)

// Limits of a policy's windows.
const (
	// MaxWindowPeriod is the longest rolling period a window may have; the
	// usage behind the windows is kept a day longer.
	MaxWindowPeriod = 31 * 24 * time.Hour
	// MaxWindows bounds the windows of one policy, so that what one create
	// checks under the locks stays small.
	MaxWindows = 16
	// WindowDay is the period of a window over the UTC calendar day.
	WindowDay = "day"
	// WindowNative is the asset of a window over native value.
	WindowNative = "native"
)

// Window bounds what is sent in a rolling period (or the UTC calendar
// day), per signer or per principal, in native value or in one token. It is
// counted where what was sent is known without a race: in the allocation,
// under the signer's nonce lease (and, for a principal's window, a lock on
// the principal's usage), at minute granularity.
type Window struct {
	Scope WindowScope
	// Token is the token counted (ERC-20, ERC-721 or ERC-1155: what the
	// simulated effects move of it out of the signer, as TokenRule.MaxPerTx
	// sums it); the zero address counts native value: each transaction's
	// worst-case cost, value, gas at the fee ceiling and any L1 data fee,
	// so fees count.
	Token common.Address
	// ChainID is the chain counted: required with a token; 0 with native
	// value is every chain, each counted apart.
	ChainID uint64
	// Period is the rolling duration, whole minutes up to MaxWindowPeriod;
	// 0 when Day.
	Period time.Duration
	// Day counts the UTC calendar day instead of a rolling duration.
	Day bool
	// MaxAmount caps the sum of what the window counts (wei for native
	// value, token units for a token; nil: no cap).
	MaxAmount *big.Int
	// MaxCount caps the transactions the window counts (0: no cap). A
	// token's window counts only the transactions that move the token out.
	MaxCount int
}

// Native reports whether the window counts native value.
func (w Window) Native() bool { return w.Token == (common.Address{}) }

// PeriodText is the window's period as a policy writes it: "day", or a
// whole number of days, hours or minutes ("7d", "1h", "90m").
func (w Window) PeriodText() string {
	switch {
	case w.Day:
		return WindowDay
	case w.Period%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(w.Period/(24*time.Hour)), 10) + "d"
	case w.Period%time.Hour == 0:
		return strconv.FormatInt(int64(w.Period/time.Hour), 10) + "h"
	}
	return strconv.FormatInt(int64(w.Period/time.Minute), 10) + "m"
}

// ParseWindowPeriod reads a window's period: "day" (the UTC calendar day),
// or a duration of whole minutes ("30m", "1h", "1h30m", "7d"; d is 24h).
func ParseWindowPeriod(s string) (period time.Duration, day bool, err error) {
	if s == WindowDay {
		return 0, true, nil
	}
	rest, days := s, int64(0)
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, perr := strconv.ParseInt(s[:i], 10, 32)
		if perr != nil || n < 0 {
			return 0, false, fmt.Errorf("%q is not a period: give \"day\" or a duration such as 30m, 1h or 7d", s)
		}
		days, rest = n, s[i+1:]
	}
	if rest != "" {
		period, err = time.ParseDuration(rest)
		if err != nil || strings.ContainsAny(rest, "d") {
			return 0, false, fmt.Errorf("%q is not a period: give \"day\" or a duration such as 30m, 1h or 7d", s)
		}
	}
	if days > int64(MaxWindowPeriod/(24*time.Hour)) {
		return 0, false, fmt.Errorf("%q is longer than %s", s, Window{Period: MaxWindowPeriod}.PeriodText())
	}
	return period + time.Duration(days)*24*time.Hour, false, nil
}

// describe says, in a refusal, what the window counts, of what, over which
// period, up to what.
func (w Window) describe() string {
	var asset string
	switch {
	case !w.Native():
		asset = fmt.Sprintf("units of token %s on chain %d", CanonicalAddress(w.Token), w.ChainID)
	case w.ChainID != 0:
		asset = fmt.Sprintf("wei of native value on chain %d (worst-case cost: value, execution fees and any L1 data fee)", w.ChainID)
	default:
		asset = "wei of native value on the chain (worst-case cost: value, execution fees and any L1 data fee)"
	}
	var limits []string
	if w.MaxAmount != nil {
		limits = append(limits, w.MaxAmount.String()+" "+asset)
	}
	if w.MaxCount > 0 {
		limits = append(limits, fmt.Sprintf("%d transactions", w.MaxCount))
	}
	whose := "sent by this principal from any signer"
	if w.Scope == WindowSigner {
		whose = "sent by the signer whoever created them"
	}
	period := "in the last " + w.PeriodText()
	if w.Day {
		period = "in the UTC day"
	}
	return fmt.Sprintf("at most %s %s, %s", strings.Join(limits, " and "), whose, period)
}

// WindowCheck is one of the creator's windows a request counts in, with
// what it counts there.
type WindowCheck struct {
	Index  int // in Policy.Windows
	Window Window
	Amount *big.Int // wei (native) or token units
}

// WindowChecks are the windows of p that r counts in, in the policy's
// order: a native window of r's chain (or of every chain) with r's
// worst-case cost (its value where the cost is not counted), a token's
// window of r's chain with what r's effects move of the token out of its
// signer, when they move any.
func (p Policy) WindowChecks(r *Request) []WindowCheck {
	var checks []WindowCheck
	var out map[common.Address]*big.Int
	for i, w := range p.Windows {
		if w.ChainID != 0 && w.ChainID != r.ChainID {
			continue
		}
		amount := new(big.Int)
		switch {
		case !w.Native():
			if out == nil {
				out = TokensOut(r.From, r.Effects)
			}
			moved := out[w.Token]
			if moved == nil || moved.Sign() == 0 {
				continue
			}
			amount.Set(moved)
		case r.Cost != nil:
			amount.Set(r.Cost)
		case r.Value != nil:
			amount.Set(r.Value)
		}
		checks = append(checks, WindowCheck{Index: i, Window: w, Amount: amount})
	}
	return checks
}

// HasWindows reports whether the policy has any window.
func (p Policy) HasWindows() bool { return len(p.Windows) > 0 }

// hasTokenWindows reports whether a window counts a token, which needs the
// simulated effects.
func (p Policy) hasTokenWindows() bool {
	return slices.ContainsFunc(p.Windows, func(w Window) bool { return !w.Native() })
}

// WatchesSigners reports whether the policy has a signer's window: the
// signers it names (or every signer) must then have what they send counted,
// whoever creates it.
func (p Policy) WatchesSigners() bool {
	return slices.ContainsFunc(p.Windows, func(w Window) bool { return w.Scope == WindowSigner })
}

// TokensOut sums, per token, what effects move out of signer: the token
// transfers (ERC-20, ERC-721, ERC-1155) whose From is signer, summed as
// TokenRule.MaxPerTx sums them. Tokens with nothing moved are absent.
func TokensOut(signer common.Address, effects []Effect) map[common.Address]*big.Int {
	out := map[common.Address]*big.Int{}
	for _, e := range effects {
		if e.From != signer {
			continue
		}
		switch e.Kind {
		case EffectERC20Transfer, EffectERC721Transfer, EffectERC1155Transfer:
			a := amountOf(e)
			if a.Sign() <= 0 {
				continue
			}
			sum, ok := out[e.Token]
			if !ok {
				sum = new(big.Int)
				out[e.Token] = sum
			}
			sum.Add(sum, a)
		}
	}
	return out
}

// WindowRefusal is the refusal of a request that would take the window at
// index past its cap: rule is RuleWindowAmount or RuleWindowCount. It
// names the window, not what was sent in it (a signer's window counts other
// principals' sends).
func (p Policy) WindowRefusal(rule string, index int) *Refusal {
	if index < 0 || index >= len(p.Windows) {
		return &Refusal{Rule: rule, Detail: "a window would be passed"}
	}
	what := "amount"
	if rule == RuleWindowCount {
		what = "count"
	}
	return &Refusal{Rule: rule, Detail: fmt.Sprintf("the transaction would pass the %s cap of windows[%d]: %s",
		what, index, p.Windows[index].describe())}
}

// validateWindows checks the windows: a known scope, a chain with a token,
// a period of whole minutes within MaxWindowPeriod or the day, something
// limited, and no window twice.
func (p Policy) validateWindows(v *ValidationError) {
	if len(p.Windows) > MaxWindows {
		v.Add("windows", "at most %d windows, got %d", MaxWindows, len(p.Windows))
	}
	type key struct {
		scope  WindowScope
		token  common.Address
		chain  uint64
		period time.Duration
		day    bool
	}
	seen := map[key]int{}
	for i, w := range p.Windows {
		field := fmt.Sprintf("windows[%d]", i)
		if w.Scope != WindowSigner && w.Scope != WindowPrincipal {
			v.Add(field+".scope", "must be %q or %q, got %q", WindowSigner, WindowPrincipal, w.Scope)
		}
		if !w.Native() && w.ChainID == 0 {
			v.Add(field+".chainId", "is required with a token: the chain the token is on")
		}
		switch {
		case w.Day && w.Period != 0:
			v.Add(field+".period", "give \"day\" or a duration, not both")
		case w.Day:
		case w.Period < time.Minute || w.Period%time.Minute != 0:
			v.Add(field+".period", "must be \"day\" or a whole number of minutes, at least 1m, got %s", w.Period)
		case w.Period > MaxWindowPeriod:
			v.Add(field+".period", "must be at most %s, got %s", Window{Period: MaxWindowPeriod}.PeriodText(), w.PeriodText())
		}
		switch {
		case w.MaxAmount != nil && w.MaxAmount.Sign() < 0:
			v.Add(field+".maxAmount", "must not be negative")
		case w.MaxCount < 0:
			v.Add(field+".maxCount", "must not be negative")
		case w.MaxAmount == nil && w.MaxCount == 0:
			v.Add(field, "limits nothing: give maxAmount, maxCount or both")
		}
		k := key{w.Scope, w.Token, w.ChainID, w.Period, w.Day}
		if j, dup := seen[k]; dup {
			v.Add(field, "the same window as windows[%d] (scope, asset, chain and period): give one, with both limits", j)
			continue
		}
		seen[k] = i
	}
}
