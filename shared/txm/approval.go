package txm

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
)

// Approvals: a create above a threshold of its creator's policy waits, as a
// PENDING_APPROVAL transaction without a nonce, for M approvals of N named
// principals or of the approver role; a rejection or an expiry ends it.

// Sub-states of a transaction that ended while it waited for approval
// (FAILED_FINAL, without a nonce).
const (
	// SubStateRejected: an approver rejected it.
	SubStateRejected = "rejected"
	// SubStateApprovalExpired: its approvals did not come before the
	// approval expired.
	SubStateApprovalExpired = "approval_expired"
	// SubStateRevertedAtApproval: simulated again at its last approval, it
	// reverted (or failed in the EVM): the state it depends on moved.
	SubStateRevertedAtApproval = "reverted_at_approval"
	// SubStateRefusedAtApproval: checked again at its last approval, its
	// creator's policy refused it (a cap, a rule on effects, a rolling
	// cap), or its values no longer pass (the signer's balance, the gas
	// cap); the last error names the rule.
	SubStateRefusedAtApproval = "refused_at_approval"
)

// ApprovalSubStates lists the sub-states of a transaction that ended
// without a nonce.
var ApprovalSubStates = []string{SubStateRejected, SubStateApprovalExpired, SubStateRevertedAtApproval, SubStateRefusedAtApproval}

// Approval limits.
const (
	// DefaultApprovalExpiry is how long a transaction waits for approval
	// when its rule does not say.
	DefaultApprovalExpiry = 24 * time.Hour
	// MaxApprovalExpiry is the longest a rule may let one wait.
	MaxApprovalExpiry = 30 * 24 * time.Hour
	// MaxDecisionText bounds an approval's comment and a rejection's
	// reason, in bytes.
	MaxDecisionText = 1000
)

// AssetNative names native value in an approval rule.
const AssetNative = "native"

// ApprovalRule makes a transaction wait for approval when what it moves of
// one asset is above a threshold.
type ApprovalRule struct {
	// Token is the asset: nil for native value, else a token contract.
	Token *common.Address
	// ChainID is the chain the rule applies on: required with a token; 0
	// with native value, every chain.
	ChainID uint64
	// Above is the threshold the transaction must exceed. Native: its
	// worst-case cost in wei (value + gas × fee ceiling + L1 data fee,
	// Request.Cost).
	// Token: what its simulated effects move of the token out of the
	// signer, summed as a TokenRule's MaxPerTx sums it.
	Above *big.Int
	// Required approvals (M), of Approvers (N ≥ M named principals) or of
	// any principal whose policy grants ApproverRole on the signer.
	Required     int
	Approvers    []string
	ApproverRole Role
	// ExpiresIn is how long the transaction waits for its approvals (0:
	// DefaultApprovalExpiry).
	ExpiresIn time.Duration
}

// Asset is the rule's asset as the policy writes it: "native" or the token's
// address.
func (r ApprovalRule) Asset() string {
	if r.Token == nil {
		return AssetNative
	}
	return CanonicalAddress(*r.Token)
}

// Expiry is how long a transaction held by the rule waits.
func (r ApprovalRule) Expiry() time.Duration {
	if r.ExpiresIn == 0 {
		return DefaultApprovalExpiry
	}
	return r.ExpiresIn
}

// moved is what r's request moves of the rule's asset, in the rule's
// units, and whether the rule applies on its chain at all.
func (r ApprovalRule) moved(req *Request) (*big.Int, bool) {
	if r.ChainID != 0 && r.ChainID != req.ChainID {
		return nil, false
	}
	if r.Token == nil {
		if req.Cost != nil {
			return req.Cost, true
		}
		return req.WorstCaseCost(nil), true
	}
	sum := new(big.Int)
	for _, e := range req.Effects {
		if e.From != req.From || e.Token != *r.Token {
			continue
		}
		switch e.Kind {
		case EffectERC20Transfer, EffectERC721Transfer, EffectERC1155Transfer:
			sum.Add(sum, amountOf(e))
		}
	}
	return sum, true
}

// ApprovalFor is the rule a request that passed every other check must wait
// for, or nil: of the rules whose threshold it exceeds, the one requiring
// the most approvals (the first of those when several tie). It needs the
// request's cost and effects.
func (p Policy) ApprovalFor(r *Request) *ApprovalRule {
	var best *ApprovalRule
	for i := range p.Approvals {
		rule := &p.Approvals[i]
		moved, applies := rule.moved(r)
		if !applies || rule.Above == nil || moved.Cmp(rule.Above) <= 0 {
			continue
		}
		if best == nil || rule.Required > best.Required {
			best = rule
		}
	}
	return best
}

// validateApprovals checks the approval rules.
func (p Policy) validateApprovals(v *ValidationError) {
	for i, r := range p.Approvals {
		field := fmt.Sprintf("approvals[%d]", i)
		if r.Token != nil && r.ChainID == 0 {
			v.Add(field+".chainId", "is required with a token: the chain the token is on")
		}
		if r.Above == nil || r.Above.Sign() < 0 {
			v.Add(field+".above", "is required: a non-negative decimal threshold")
		}
		if r.Required < 1 {
			v.Add(field+".required", "must be at least 1")
		}
		switch {
		case len(r.Approvers) > 0 && r.ApproverRole != "":
			v.Add(field, "give approvers or approverRole, not both")
		case len(r.Approvers) == 0 && r.ApproverRole == "":
			v.Add(field, "give approvers (principals) or approverRole")
		case r.ApproverRole != "" && r.ApproverRole != RoleApprover:
			v.Add(field+".approverRole", "must be %q", RoleApprover)
		case len(r.Approvers) > 0 && len(r.Approvers) < r.Required:
			v.Add(field+".approvers", "names %d principals; %d approvals are required", len(r.Approvers), r.Required)
		}
		seen := map[string]bool{}
		for j, a := range r.Approvers {
			switch {
			case a == "" || len(a) > 320:
				v.Add(fmt.Sprintf("%s.approvers[%d]", field, j), "must be a principal (1 to 320 characters)")
			case a == p.Principal:
				v.Add(fmt.Sprintf("%s.approvers[%d]", field, j), "is the policy's own principal, which never approves its own requests")
			case seen[a]:
				v.Add(fmt.Sprintf("%s.approvers[%d]", field, j), "names %s twice", a)
			}
			seen[a] = true
		}
		if r.ExpiresIn < 0 || r.ExpiresIn > MaxApprovalExpiry {
			v.Add(field+".expiresIn", "must be a positive duration of at most %s", MaxApprovalExpiry)
		}
	}
}

// Decision is an approver's answer.
type Decision string

const (
	DecisionApprove Decision = "approve"
	DecisionReject  Decision = "reject"
)

// ApprovalDecision is one approver's decision on a transaction.
type ApprovalDecision struct {
	Principal string
	Decision  Decision
	// Text is an approval's comment or a rejection's reason ("" for an
	// approval without one).
	Text string
	At   time.Time
}

// Approval is what a transaction held for approval waits for: its rule as
// it was when the transaction was held, and the decisions so far.
type Approval struct {
	// Asset and Above are the rule's, for the record.
	Asset        string
	Above        *big.Int
	Required     int
	Approvers    []string // named approvers; nil with ApproverRole
	ApproverRole Role
	ExpiresAt    time.Time
	// GasEstimated says the creator gave no gas limit: it is estimated
	// again when the transaction is simulated at its last approval.
	GasEstimated bool
	// ErrorABI is the creator's description of the call's custom errors,
	// to decode a revert at approval.
	ErrorABI  string
	Decisions []ApprovalDecision // in the order they were made
}

// Approvals are the approvals so far, in order.
func (a *Approval) Approvals() []ApprovalDecision {
	var out []ApprovalDecision
	for _, d := range a.Decisions {
		if d.Decision == DecisionApprove {
			out = append(out, d)
		}
	}
	return out
}

// Rejection is the rejection, if any.
func (a *Approval) Rejection() *ApprovalDecision {
	for i, d := range a.Decisions {
		if d.Decision == DecisionReject {
			return &a.Decisions[i]
		}
	}
	return nil
}

// Complete reports whether the transaction has its required approvals.
func (a *Approval) Complete() bool { return len(a.Approvals()) >= a.Required }

// Approval errors, each an HTTP answer of its own.
var (
	// ErrSelfApproval: the principal that asked for the transaction
	// decides on it (403).
	ErrSelfApproval = errors.New("nobody approves or rejects their own request")
	// ErrNotApprover: the caller is not an approver of the transaction
	// (403).
	ErrNotApprover = errors.New("not an approver of this transaction")
	// ErrAlreadyDecided: the approver decided on the transaction before
	// (409).
	ErrAlreadyDecided = errors.New("this approver has decided on the transaction already")
	// ErrNotPendingApproval: the transaction does not wait for approval:
	// it never needed one, or was approved, rejected or expired (409).
	ErrNotPendingApproval = errors.New("the transaction is not waiting for approval")
)

// CheckDecider returns why principal, whose policy is pol, may not decide on
// t, or nil: the requester never decides on its own request; a decider is
// named by the rule, or holds the rule's role on the transaction's signer;
// each decides once; only a transaction waiting for approval is decided on
// (its expiry is the database's to judge, when the decision is written).
// Who may not read t is not told even that (ErrNotFound; the caller checks
// CanRead first).
func (t *Tx) CheckDecider(principal string, pol Policy) error {
	a := t.Approval
	if a == nil {
		return ErrNotPendingApproval
	}
	if t.Principal != "" && principal == t.Principal {
		return ErrSelfApproval
	}
	eligible := slices.Contains(a.Approvers, principal) ||
		a.ApproverRole != "" && pol.Has(a.ApproverRole) && pol.CoversSigner(t.From)
	if !eligible {
		return ErrNotApprover
	}
	for _, d := range a.Decisions {
		if d.Principal == principal {
			return ErrAlreadyDecided
		}
	}
	if t.State != StatePendingApproval {
		return ErrNotPendingApproval
	}
	return nil
}

// CheckDecisionText checks an approval's comment (optional) or a
// rejection's reason (required).
func CheckDecisionText(d Decision, text string) error {
	field := "comment"
	if d == DecisionReject {
		field = "reason"
	}
	v := &ValidationError{}
	switch {
	case d == DecisionReject && text == "":
		v.Add(field, "is required: why the transaction is rejected, for the requester and the audit trail")
	case len(text) > MaxDecisionText || !utf8.ValidString(text):
		v.Add(field, "must be valid text of at most %d bytes", MaxDecisionText)
	}
	return v.Err()
}

// Hold is a create held for approval: its id, the request as it passed
// every check (cost and effects included) and the approval it waits for,
// which expires ExpiresIn after it is written (database time).
type Hold struct {
	ID        string
	Request   *Request
	Approval  Approval
	ExpiresIn time.Duration
	Owner     string // the instance that held it, for the history
}

// ApprovalStore keeps transactions held for approval and their decisions.
type ApprovalStore interface {
	// Hold writes a PENDING_APPROVAL transaction without a nonce, with its
	// simulation and approval, and returns it, unless its request id
	// exists: then it returns the existing transaction (created false).
	Hold(ctx context.Context, h Hold) (t *Tx, created bool, err error)
	// Decide records principal's approval of txID, if the transaction
	// still waits for approval and has not expired
	// (ErrNotPendingApproval) and principal has not decided on it
	// (ErrAlreadyDecided).
	Decide(ctx context.Context, txID, principal, comment string) error
	// Reject records principal's rejection of txID and ends it
	// FAILED_FINAL rejected, with its outcome reported, under the same
	// conditions as Decide; it returns the outbox rows to relay.
	Reject(ctx context.Context, txID, principal, reason string) ([]int64, error)
	// EndApproval ends txID, if it still waits for approval, FAILED_FINAL
	// with subState and lastError (and the revert of its simulation at
	// approval, when it reverted), its outcome reported; it returns the
	// outbox rows to relay (none when the transaction had left
	// PENDING_APPROVAL).
	EndApproval(ctx context.Context, txID, subState, lastError string, sim *SimRecord) ([]int64, error)
	// ApprovedPending lists the transactions that have their approvals and
	// still wait (their allocation failed, or its caller stopped).
	ApprovedPending(ctx context.Context, limit int) ([]string, error)
	// ExpireApprovals ends FAILED_FINAL approval_expired the transactions
	// whose approval expired without their approvals, reporting each; it
	// returns how many and the outbox rows to relay.
	ExpireApprovals(ctx context.Context, limit int) (int, []int64, error)
}

// SimRecord is a simulation to record with a transaction: how it ran, its
// effects and, for one that reverted, its decoded reason.
type SimRecord struct {
	Method  SimMethod
	Effects []Effect
	Revert  string
}
