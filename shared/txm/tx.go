package txm

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Request is a validated create request: what the caller asked to send.
type Request struct {
	ChainID              uint64
	From                 common.Address
	To                   *common.Address // nil: contract creation
	Value                *big.Int
	Data                 []byte
	GasLimit             uint64   // as the caller gave it; 0: estimate
	GasEstimate          uint64   // filled in by estimation when GasLimit is 0; not fingerprinted
	MaxFeePerGas         *big.Int // nil: chosen at signing
	MaxPriorityFeePerGas *big.Int
	GasPrice             *big.Int // legacy chains
	RequestID            string   // the caller's, or one txfence made up (every create is idempotent)
	MadeUpID             bool     // RequestID was made up by txfence for this request: no row has it yet
	Metadata             json.RawMessage
	// SendVia is the route every broadcast of the transaction takes, as
	// its create named it: a send-only endpoint of its chain, or "public"
	// (the chain's read endpoints only); "" takes its signer's route. Part
	// of the fingerprint when given: a replay that names another route
	// asks for another transaction.
	SendVia string
	// Principal is who asked for it (not part of the fingerprint).
	Principal string
	// FeeCeiling is the creator's cap on what any attempt of the
	// transaction pays per gas (the first, a bump, a replacement, a
	// cancel): its policy's maxFeePerGas; nil: none, the chain's fee cap
	// alone bounds the attempts. Not part of the fingerprint.
	FeeCeiling *big.Int
	// Cost is the worst-case cost counted at creation (WorstCaseCost), what
	// the caps on the principal count; nil: the value. Not part of the
	// fingerprint.
	Cost *big.Int
	// ExecutionFee is the most the transaction's execution can cost, its
	// gas at the fee ceiling (ExecutionFeeBound), as counted at creation;
	// nil when nothing bounded it, or before it was counted. Not part of
	// the fingerprint.
	ExecutionFee *big.Int
	// DataFee is the L2 data fee priced at creation (DataFeeOracle), what
	// the chain charges beside the execution gas for posting the
	// transaction to its L1; zero on a chain without one, nil before it was
	// priced. Not part of the fingerprint.
	DataFee *big.Int
	// ErrorABI is the caller's description of the custom errors the call
	// may revert with (a JSON ABI or a signature), used only to decode a
	// revert's arguments. Not stored, not part of the fingerprint.
	ErrorABI string
	// Simulation is how the create's simulation ran; "" when it needed
	// none (a plain transfer). Not part of the fingerprint.
	Simulation SimMethod
	// Effects are what the simulation showed the transaction moves or
	// allows (nil when it needed none, or it reverted).
	Effects []Effect
	// SimulationRevert is the decoded reason of a simulation that reverted
	// and was accepted anyway (an advisory simulation policy); "" otherwise.
	SimulationRevert string
	// Approved says the request is that of a transaction held for approval
	// (PENDING_APPROVAL) that has its approvals: its allocation numbers that
	// transaction's row rather than writing a new one. Not part of the
	// fingerprint.
	Approved bool
}

// PerGasBound is the most any attempt of the transaction may pay per gas
// on a chain whose fee cap is chainCap: the lower of its fee ceiling and
// chainCap; nil when neither bounds it.
func (r *Request) PerGasBound(chainCap *big.Int) *big.Int {
	perGas := chainCap
	if r.FeeCeiling != nil && (perGas == nil || r.FeeCeiling.Cmp(perGas) < 0) {
		perGas = r.FeeCeiling
	}
	return perGas
}

// ExecutionFeeBound is the most the transaction's execution can cost on a
// chain whose fee cap is chainCap: its gas limit at PerGasBound; nil when
// nothing bounds it.
func (r *Request) ExecutionFeeBound(chainCap *big.Int) *big.Int {
	perGas := r.PerGasBound(chainCap)
	if perGas == nil {
		return nil
	}
	return new(big.Int).Mul(new(big.Int).SetUint64(r.Gas()), perGas)
}

// WorstCaseCost is the most the transaction can take from its signer on a
// chain whose fee cap is chainCap: its value, its execution fee bound
// (ExecutionFeeBound; none when nothing bounds it) and its data fee
// (DataFee, when priced).
func (r *Request) WorstCaseCost(chainCap *big.Int) *big.Int {
	cost := new(big.Int)
	if r.Value != nil {
		cost.Set(r.Value)
	}
	if fee := r.ExecutionFeeBound(chainCap); fee != nil {
		cost.Add(cost, fee)
	}
	if r.DataFee != nil {
		cost.Add(cost, r.DataFee)
	}
	return cost
}

// Gas is the gas limit to sign with: the caller's, or the estimate.
func (r *Request) Gas() uint64 {
	if r.GasLimit > 0 {
		return r.GasLimit
	}
	return r.GasEstimate
}

// Fingerprint is the sha256 of the request's payload in a canonical form:
// two requests with the same fingerprint ask for the same transaction. The
// request id is not part of it.
func (r *Request) Fingerprint() [32]byte {
	b := make([]byte, 0, 256)
	u64 := func(v uint64) { b = binary.BigEndian.AppendUint64(b, v) }
	bytesField := func(p []byte) { u64(uint64(len(p))); b = append(b, p...) }
	bigField := func(v *big.Int) {
		if v == nil {
			b = append(b, 0)
			return
		}
		b = append(b, 1)
		bytesField(v.Bytes())
	}
	b = append(b, "txfence/request/v1"...)
	u64(r.ChainID)
	b = append(b, r.From.Bytes()...)
	if r.To == nil {
		b = append(b, 0)
	} else {
		b = append(b, 1)
		b = append(b, r.To.Bytes()...)
	}
	bigField(r.Value)
	bytesField(r.Data)
	u64(r.GasLimit)
	bigField(r.MaxFeePerGas)
	bigField(r.MaxPriorityFeePerGas)
	bigField(r.GasPrice)
	bytesField(canonicalJSON(r.Metadata))
	if r.SendVia != "" {
		// Appended only when given, so that the fingerprints stored
		// before it existed stay what they were.
		b = append(b, "sendVia"...)
		bytesField([]byte(r.SendVia))
	}
	return sha256.Sum256(b)
}

func canonicalJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return raw
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw
	}
	return out
}

// Tx is a managed transaction: one nonce of one signer on one chain, and
// where it stands.
type Tx struct {
	ID      string
	Request // what was asked
	Nonce   uint64
	// NoNonce says the transaction holds no nonce (Nonce is meaningless):
	// it waits for approval, or ended before it was allocated one.
	NoNonce bool
	// Approval is what the transaction waits for, or waited for, before it
	// got a nonce; nil for a transaction that needed no approval.
	Approval *Approval

	Fingerprint [32]byte
	State       State
	SubState    string
	LastError   string
	ReorgCount  int

	Hash           *common.Hash // the latest attempt's hash, once signed
	Attempts       int
	BroadcastCount int      // broadcasts of its attempts so far
	Receipt        *Receipt // once mined

	// Backoff: rounds of work that failed in a row, since when, and when
	// the transaction may be worked again (nil: now).
	Failures        int
	FailingSince    *time.Time
	NextAttemptAt   *time.Time
	StuckSince      *time.Time
	LastBroadcastAt *time.Time

	CreatedAt time.Time
	UpdatedAt time.Time
}

// Due reports whether the transaction's backoff has run out at now.
func (t *Tx) Due(now time.Time) bool { return t.NextAttemptAt == nil || !t.NextAttemptAt.After(now) }

// CreateOutcome says what a create request did.
type CreateOutcome string

const (
	// OutcomeCreated: a new transaction with a new nonce.
	OutcomeCreated CreateOutcome = "created"
	// OutcomeReplayed: the request id exists with the same payload; the
	// original is returned and no nonce is consumed.
	OutcomeReplayed CreateOutcome = "replayed"
	// OutcomeConflict: the request id exists with a different payload; the
	// existing transaction is returned and no nonce is consumed.
	OutcomeConflict CreateOutcome = "conflict"
	// OutcomeRefused: a rolling cap of the caller's policy refused it inside
	// the allocation; no row, no nonce. Refusal says which.
	OutcomeRefused CreateOutcome = "refused"
)

// Created is the answer to one create request.
type Created struct {
	Outcome CreateOutcome
	Tx      *Tx
	Refusal error // a *Refusal, with OutcomeRefused
	// Contended says that the allocation waited for another one of the
	// same signer (another instance's): the same for every request of a
	// signer's batch.
	Contended bool
}

// Resolve decides what a request whose id already exists amounts to.
func Resolve(existing *Tx, fingerprint [32]byte) Created {
	if existing.Fingerprint == fingerprint {
		return Created{Outcome: OutcomeReplayed, Tx: existing}
	}
	return Created{Outcome: OutcomeConflict, Tx: existing}
}

// CursorState is what the database knows of a signer's next nonce.
type CursorState struct {
	Exists  bool
	Next    uint64
	SyncAge time.Duration // since the chain's pending nonce was last folded in (database time)
	Synced  bool          // false: never synced with the chain
}

// NeedsChainSync reports whether the chain must be asked for the pending
// nonce before allocating: the cursor is new, was never synced, or its last
// sync is older than timeout. The stored time is the cache every instance
// shares.
func (c CursorState) NeedsChainSync(timeout time.Duration) bool {
	return !c.Exists || !c.Synced || c.SyncAge >= timeout
}

// NextNonce is where the next allocation starts: the larger of the
// database cursor and the chain's pending nonce (when it was asked). The
// cursor never moves backwards.
func NextNonce(c CursorState, chainPending *uint64) uint64 {
	next := uint64(0)
	if c.Exists {
		next = c.Next
	}
	if chainPending != nil && *chainPending > next {
		next = *chainPending
	}
	return next
}
