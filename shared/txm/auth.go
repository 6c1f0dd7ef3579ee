package txm

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Authentication and authorization: who calls, and what each caller may do.
// txfence is closed by default: a caller with no policy may do nothing.

// Principal is an authenticated caller.
type Principal struct {
	// ID names the caller in policies and audit rows: the verified email
	// of a Google-signed ID token (a service account's), the owner an API
	// key was created for, or "dev" in development mode.
	ID string
	// Via says how it was authenticated: "oidc", "apikey" or "dev".
	Via string
}

// Credential is what a call presented: the bearer token of its
// Authorization header ("" when there was none).
type Credential struct {
	Bearer string
}

// Authenticator turns a credential into a principal, or ErrUnauthenticated
// (wrapped with why, for logs; the caller is never told more than 401).
type Authenticator interface {
	Authenticate(ctx context.Context, c Credential) (Principal, error)
}

// Role is what a principal may do, route by route.
type Role string

const (
	// RoleSender may create transactions (for its signers) and follow the
	// ones it created: by id, by request id, in lists and in the
	// completions feed. It reads no other principal's transactions.
	RoleSender Role = "sender"
	// RoleReader may read every transaction of its signers (whoever created
	// it), the signers themselves and their completions feed.
	RoleReader Role = "reader"
	// RoleAdmin may act on the transactions of its signers (resubmit,
	// replace, cancel), read what a reader of them reads, and write
	// policies within its own signers.
	RoleAdmin Role = "admin"
	// RoleApprover may approve or reject the transactions of its signers
	// that wait for approval under a rule that names the role (approverRole),
	// and reads what a reader of them reads, so that it sees what it
	// decides on. It never decides on its own requests.
	RoleApprover Role = "approver"
)

// Roles lists every role.
var Roles = []Role{RoleSender, RoleReader, RoleAdmin, RoleApprover}

// Limit bounds what a principal sends from one signer in a rolling window.
// A nil Value or a zero Count does not limit.
type Limit struct {
	Value *big.Int // wei
	Count int      // transactions
}

// Policy is what one principal may do. Policies are versioned: a change
// writes a new version.
type Policy struct {
	Principal string
	Version   int
	Roles     []Role
	// Signers the principal may send from (sender) or read (reader): nil
	// or empty is none, AllSigners is every configured signer.
	Signers    []common.Address
	AllSigners bool
	// MaxValue caps what one transaction may take from its signer: its
	// worst-case cost, value + gas limit × fee ceiling + the L1 data fee
	// (nil: no cap).
	MaxValue *big.Int
	// MaxGasLimit caps one transaction's gas limit, given or estimated (0:
	// the configured TXFENCE_MAX_GAS_LIMIT only).
	MaxGasLimit uint64
	// MaxFeePerGas caps what any attempt of the principal's transactions
	// pays per gas, bumps and replacements included: it becomes their fee
	// ceiling where it is below the chain's cap (nil: the chain's cap).
	MaxFeePerGas *big.Int
	// SkipEstimation lets a create without data that gives its gas limit
	// skip the gas estimate and the code check of its destination: it is
	// taken for a plain transfer. A create with data is simulated whatever
	// this says; otherwise a given gas limit is checked by estimation too.
	SkipEstimation bool
	// SimulationAdvisory records a create's simulation without enforcing
	// it: a call that reverts is accepted (its revert recorded), for flows
	// whose transactions depend on the signer's own pending ones. The
	// default enforces: a revert is refused. No request can choose.
	SimulationAdvisory bool
	// Hourly and Daily cap, per signer, what the principal sends in the last
	// hour and the last 24 hours.
	Hourly, Daily Limit
	// Windows cap what is sent in rolling periods or the UTC day, per
	// signer (whoever creates) or per principal (from every signer), in
	// native value (fees included) or per token.
	Windows []Window
	// Allowlist, when not nil, is every destination the principal may send
	// to (contract creations are refused).
	Allowlist []common.Address
	// Tokens, TokenRecipients, Spenders and NoUnlimitedApprovals judge what
	// a transaction moves or allows, as its simulation shows it
	// (CheckEffects), not only its to and value.
	//
	// Tokens are the per-token rules, at most one per token and chain.
	Tokens []TokenRule
	// TokenRecipients, when not nil, is every address a token transfer from
	// the signer (ERC-20, ERC-721, ERC-1155) may go to, whatever the
	// transaction's to.
	TokenRecipients []common.Address
	// Spenders, when not nil, is every address the signer may grant an
	// approval to (an ERC-20 allowance, an ERC-721 token's approval, an
	// operator for all).
	Spenders []common.Address
	// NoUnlimitedApprovals refuses an ERC-20 allowance of
	// UnlimitedAllowance or more, and any operator-for-all grant.
	NoUnlimitedApprovals bool
	// RatePerSecond and Burst bound the principal's calls per instance
	// (0: the configured default).
	RatePerSecond float64
	Burst         int
	// MaxWaits caps the principal's concurrent completion long-polls per
	// instance (0: the configured default).
	MaxWaits  int
	CreatedAt time.Time
	CreatedBy string

	// Approvals are the rules above whose thresholds the principal's
	// transactions wait for approval (ApprovalFor).
	Approvals []ApprovalRule
}

// Has reports whether the policy grants role. Admin and approver imply
// reader (an admin reads what it acts on, an approver what it decides on);
// sender implies nothing: what a sender reads of its own transactions is
// CanRead's to say.
func (p Policy) Has(role Role) bool {
	return slices.Contains(p.Roles, role) ||
		role == RoleReader && (slices.Contains(p.Roles, RoleAdmin) || slices.Contains(p.Roles, RoleApprover))
}

// CoversSigner reports whether the policy names signer.
func (p Policy) CoversSigner(signer common.Address) bool {
	return p.AllSigners || slices.Contains(p.Signers, signer)
}

// CanRead reports whether principal, whose policy this is, may read t: a
// reader (or admin) of t's signer reads every transaction of it, a sender of
// it the transactions it created. What a caller may not read it is told
// nothing of, not even that it exists.
func (p Policy) CanRead(principal string, t *Tx) bool {
	if !p.CoversSigner(t.From) {
		return false
	}
	return p.Has(RoleReader) || p.Has(RoleSender) && t.Principal != "" && t.Principal == principal
}

// ReadsOwnOnly reports whether the policy reads only its principal's own
// transactions (a sender without reader): its lists and feed are narrowed to
// them.
func (p Policy) ReadsOwnOnly() bool { return !p.Has(RoleReader) }

// CheckGrant returns a *Refusal (RuleSigner) unless every signer q names is
// one p names: a principal writes policies only within its own signers, and
// only a policy of every signer writes one of every signer. A policy being
// replaced must pass it too, so that a narrower admin cannot take another
// principal's wider rights away.
func (p Policy) CheckGrant(q Policy) error {
	if q.AllSigners && !p.AllSigners {
		return &Refusal{Rule: RuleSigner, Detail: "only a policy of every signer may grant every signer"}
	}
	if p.AllSigners {
		return nil
	}
	for _, s := range q.Signers {
		if !slices.Contains(p.Signers, s) {
			return &Refusal{Rule: RuleSigner, Detail: "the caller's policy does not name " + CanonicalAddress(s)}
		}
	}
	return nil
}

// Validate checks a policy before it is stored.
func (p Policy) Validate() error {
	v := &ValidationError{}
	if p.Principal == "" || len(p.Principal) > 320 {
		v.Add("principal", "is required (at most 320 characters)")
	}
	if len(p.Roles) == 0 {
		v.Add("roles", "give at least one of sender, reader, admin, approver")
	}
	for _, r := range p.Roles {
		if !slices.Contains(Roles, r) {
			v.Add("roles", "%q is not one of sender, reader, admin, approver", r)
		}
	}
	for name, w := range map[string]*big.Int{"maxValue": p.MaxValue, "hourly.value": p.Hourly.Value, "daily.value": p.Daily.Value,
		"maxFeePerGas": p.MaxFeePerGas} {
		if w != nil && w.Sign() < 0 {
			v.Add(name, "must not be negative")
		}
	}
	if p.Hourly.Count < 0 || p.Daily.Count < 0 {
		v.Add("count", "must not be negative")
	}
	if p.RatePerSecond < 0 || p.Burst < 0 || p.MaxWaits < 0 {
		v.Add("rate", "ratePerSecond, burst and maxWaits must not be negative")
	}
	p.validateTokens(v)
	p.validateWindows(v)
	p.validateApprovals(v)
	return v.Err()
}

// Refusal names the policy rule that refused a call. It matches
// ErrForbidden under errors.Is.
type Refusal struct {
	// Rule is one of the Rule constants: role, signer, max_value,
	// max_gas_limit, max_fee_per_gas, hourly_value, hourly_count,
	// daily_value, daily_count, window_amount, window_count, allowlist,
	// and the rules on effects tokens_max_per_tx, tokens_protected,
	// token_recipients, spenders, no_unlimited_approvals, effects_unknown.
	Rule   string
	Detail string
}

func (r *Refusal) Error() string { return fmt.Sprintf("forbidden by rule %s: %s", r.Rule, r.Detail) }

// Is makes a *Refusal match ErrForbidden.
func (r *Refusal) Is(target error) bool { return target == ErrForbidden }

// Refusal rules.
const (
	RuleRole        = "role"
	RuleSigner      = "signer"
	RuleMaxValue    = "max_value"
	RuleMaxGasLimit = "max_gas_limit"
	RuleMaxFee      = "max_fee_per_gas"
	RuleAllowlist   = "allowlist"
	RuleHourlyValue = "hourly_value"
	RuleHourlyCount = "hourly_count"
	RuleDailyValue  = "daily_value"
	RuleDailyCount  = "daily_count"
	// RuleWindowAmount and RuleWindowCount refuse what would take one of
	// the policy's windows past its maxAmount or its maxCount.
	RuleWindowAmount = "window_amount"
	RuleWindowCount  = "window_count"

	// The rules on a transaction's effects (CheckEffects), each named after
	// its policy field.
	RuleTokenMaxPerTx      = "tokens_max_per_tx"
	RuleTokenProtected     = "tokens_protected"
	RuleTokenRecipients    = "token_recipients"
	RuleSpenders           = "spenders"
	RuleUnlimitedApprovals = "no_unlimited_approvals"
	// RuleEffectsUnknown refuses a transaction the rules on effects cannot
	// judge: its chain's node does not show token effects.
	RuleEffectsUnknown = "effects_unknown"
)

// Require returns a *Refusal unless the policy grants one of roles.
func (p Policy) Require(roles ...Role) error {
	for _, r := range roles {
		if p.Has(r) {
			return nil
		}
	}
	if len(roles) == 1 {
		return &Refusal{Rule: RuleRole, Detail: fmt.Sprintf("the %s role is required", roles[0])}
	}
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	return &Refusal{Rule: RuleRole, Detail: "one of the roles " + strings.Join(names, ", ") + " is required"}
}

// CheckSend is every rule a create request must pass that does not depend
// on what the principal sent before or on the chain: the sender role, the
// signer, the value cap (the value alone; CheckCost counts the fees once
// the gas limit is known), the gas limit and fees the caller gave, the
// allowlist. The rolling caps are checked where the usage is known
// (UsageRefusal).
func (p Policy) CheckSend(r *Request) error {
	if err := p.Require(RoleSender); err != nil {
		return err
	}
	if !p.CoversSigner(r.From) {
		return &Refusal{Rule: RuleSigner, Detail: "the principal may not send from " + CanonicalAddress(r.From)}
	}
	if p.MaxValue != nil && r.Value != nil && r.Value.Cmp(p.MaxValue) > 0 {
		return &Refusal{Rule: RuleMaxValue, Detail: fmt.Sprintf("the value %s wei is above the per-transaction cap of %s wei", r.Value, p.MaxValue)}
	}
	if p.MaxGasLimit > 0 && r.GasLimit > p.MaxGasLimit {
		return &Refusal{Rule: RuleMaxGasLimit, Detail: fmt.Sprintf("the gas limit %d is above the cap of %d", r.GasLimit, p.MaxGasLimit)}
	}
	if p.MaxFeePerGas != nil {
		for _, f := range []*big.Int{r.MaxFeePerGas, r.MaxPriorityFeePerGas, r.GasPrice} {
			if f != nil && f.Cmp(p.MaxFeePerGas) > 0 {
				return &Refusal{Rule: RuleMaxFee, Detail: fmt.Sprintf("a fee of %s wei per gas is above the cap of %s wei", f, p.MaxFeePerGas)}
			}
		}
	}
	if p.Allowlist != nil {
		if r.To == nil {
			return &Refusal{Rule: RuleAllowlist, Detail: "contract creations are not on the destination allowlist"}
		}
		if !slices.Contains(p.Allowlist, *r.To) {
			return &Refusal{Rule: RuleAllowlist, Detail: CanonicalAddress(*r.To) + " is not on the destination allowlist"}
		}
	}
	return nil
}

// CheckCost is what a create must pass once its gas limit is known (given,
// or estimated) and its cost counted (r.Cost): the gas limit cap, and the
// value cap counted on the worst-case cost, data fee included.
func (p Policy) CheckCost(r *Request) error {
	if p.MaxGasLimit > 0 && r.Gas() > p.MaxGasLimit {
		return &Refusal{Rule: RuleMaxGasLimit, Detail: fmt.Sprintf("the gas limit %d is above the cap of %d", r.Gas(), p.MaxGasLimit)}
	}
	if p.MaxValue != nil && r.Cost != nil && r.Cost.Cmp(p.MaxValue) > 0 {
		if r.DataFee != nil && r.DataFee.Sign() > 0 {
			return &Refusal{Rule: RuleMaxValue, Detail: fmt.Sprintf(
				"the worst-case cost %s wei (the value, %d gas at the fee ceiling and an L1 data fee of %s wei) is above the per-transaction cap of %s wei",
				r.Cost, r.Gas(), r.DataFee, p.MaxValue)}
		}
		return &Refusal{Rule: RuleMaxValue, Detail: fmt.Sprintf(
			"the worst-case cost %s wei (the value and %d gas at the fee ceiling) is above the per-transaction cap of %s wei",
			r.Cost, r.Gas(), p.MaxValue)}
	}
	return nil
}

// UsageRefusal is the refusal of a request that would take the principal
// past the rolling cap rule (RuleHourlyCount, RuleHourlyValue,
// RuleDailyCount or RuleDailyValue). The caps are checked where what the
// principal sent from the signer is known without a race: under the
// signer's nonce lease, in the allocation itself (Allocator), which checks
// them in this order and counts a request against a count cap when the count
// would pass it (usage + 1 > cap) and against a value cap when the sent
// value plus its own would pass it.
func (p Policy) UsageRefusal(rule string) *Refusal {
	switch rule {
	case RuleHourlyCount:
		return &Refusal{Rule: rule, Detail: fmt.Sprintf("%d transactions from this signer in the last hour is the cap", p.Hourly.Count)}
	case RuleHourlyValue:
		return &Refusal{Rule: rule, Detail: fmt.Sprintf("the hourly cap of %s wei (worst-case cost: value, execution fees and any L1 data fee) from this signer would be passed", p.Hourly.Value)}
	case RuleDailyCount:
		return &Refusal{Rule: rule, Detail: fmt.Sprintf("%d transactions from this signer in the last 24 hours is the cap", p.Daily.Count)}
	case RuleDailyValue:
		return &Refusal{Rule: rule, Detail: fmt.Sprintf("the daily cap of %s wei (worst-case cost: value, execution fees and any L1 data fee) from this signer would be passed", p.Daily.Value)}
	}
	return &Refusal{Rule: rule, Detail: "a rolling cap would be passed"}
}

// HasRollingCaps reports whether any rolling cap applies.
func (p Policy) HasRollingCaps() bool {
	return p.Hourly.Value != nil || p.Hourly.Count > 0 || p.Daily.Value != nil || p.Daily.Count > 0
}

// RateLimitError says when a rate-limited call may be retried.
type RateLimitError struct {
	Scope      string // "principal" or "signer"
	RetryAfter time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("rate limited (%s); retry after %s", e.Scope, e.RetryAfter)
}

// Is makes a *RateLimitError match ErrRateLimited.
func (e *RateLimitError) Is(target error) bool { return target == ErrRateLimited }

// PolicyStore keeps the versioned policies.
type PolicyStore interface {
	// Policy is the principal's current (latest) policy, or ErrNotFound.
	Policy(ctx context.Context, principal string) (Policy, error)
	// PutPolicy writes p as the principal's next version and returns it
	// (Version and CreatedAt filled in), with an audit row naming by.
	PutPolicy(ctx context.Context, p Policy, by string) (Policy, error)
	// SeedPolicies writes version 1 of each policy whose principal has none
	// (the first deploy's seed); existing policies are left alone.
	SeedPolicies(ctx context.Context, ps []Policy) error
}

// APIKey is a stored API key: only a hash of its secret is kept.
type APIKey struct {
	ID        string // public part of the key, e.g. "k_0123abcd"
	Principal string
	Hash      []byte // sha256 of the whole key
	CreatedAt time.Time
	CreatedBy string
	RevokedAt *time.Time
}

// APIKeyStore keeps API keys.
type APIKeyStore interface {
	// APIKey returns the key with id (revoked ones too), or ErrNotFound.
	APIKey(ctx context.Context, id string) (APIKey, error)
	// CreateAPIKey stores k (its ID and Hash set by the caller).
	CreateAPIKey(ctx context.Context, k APIKey) error
	// RevokeAPIKey marks the key revoked, by whom; ErrNotFound if none.
	RevokeAPIKey(ctx context.Context, id, by string) error
	// ListAPIKeys lists the principal's keys (all principals when "").
	ListAPIKeys(ctx context.Context, principal string) ([]APIKey, error)
}

// AuditEntry is one refusal or admin action, for the audit log.
type AuditEntry struct {
	Principal string
	Action    string // e.g. "create", "policy.put", "apikey.revoke", "cancel"
	Target    string // a transaction id, a principal, a key id
	Outcome   string // "refused:<rule>", "ok", "unauthenticated"
	Detail    string
}

// AuditLog records refusals and admin actions.
type AuditLog interface {
	Audit(ctx context.Context, e AuditEntry) error
}
