package txm

import "context"

// Recorder is the port to metrics and traces: what the use cases count,
// time and trace. Results are words from a closed set, never an error's
// text. NopRecorder records nothing.
type Recorder interface {
	// TxCreate counts n create requests by result.
	TxCreate(ctx context.Context, result string, n int)
	// CreateLatency records one create call's time by the result TxCreate
	// counts it under.
	CreateLatency(ctx context.Context, result string, seconds float64)
	// Latency records seconds in stage's histogram.
	Latency(ctx context.Context, stage Stage, seconds float64)
	// QueueDepth moves the number of creates waiting in the dispatcher by
	// delta.
	QueueDepth(ctx context.Context, delta int64)
	// TxSubmit counts broadcasts by result.
	TxSubmit(ctx context.Context, result string)
	// ReceiptCheck counts receipt checks by result.
	ReceiptCheck(ctx context.Context, result string)
	// OutcomeContradicted counts a reported outcome the chain contradicts.
	OutcomeContradicted(ctx context.Context, subState string)
	// Reorg counts one transaction moved back by a reorg.
	Reorg(ctx context.Context)
	// Resubmit counts resubmit actions by result.
	Resubmit(ctx context.Context, result string)
	// BumpDecision counts what the resubmit sweep decided for a
	// transaction due for a fee bump (BumpDecision* constants).
	BumpDecision(ctx context.Context, decision string)
	// Refused counts a refused call by outcome.
	Refused(ctx context.Context, outcome string)
	// PendingOldest sets the age of signer's oldest pending transaction on
	// chain chainID (0 when it has none left).
	PendingOldest(ctx context.Context, chainID uint64, signer string, seconds float64)
	// Delegated sets whether signer's account on chain chainID carries an
	// EIP-7702 delegation, as the last drain saw it (1 or 0): summed, the
	// number of delegated signers.
	Delegated(ctx context.Context, chainID uint64, signer string, delegated bool)

	// StartSpan starts a span named name, a child of ctx's span, and
	// returns the context that carries it.
	StartSpan(ctx context.Context, name string) (context.Context, Span)
	// StartClientSpan is StartSpan for a call to another service (the
	// chain's RPC).
	StartClientSpan(ctx context.Context, name string) (context.Context, Span)
}

// Span is one traced piece of work.
type Span interface {
	// End ends the span.
	End()
	// Recording reports whether what is set on the span is kept: callers
	// skip building attributes otherwise.
	Recording() bool
	// SetResult names the outcome of the span's work and marks it failed
	// when failed is true.
	SetResult(result string, failed bool)
	// SetInt sets an integer attribute.
	SetInt(key string, v int)
	// Link links the span of ctx to this one, unless ctx carries none or
	// carries this span's parent.
	Link(ctx context.Context)
}

// Stage names a stage latency histogram.
type Stage int

const (
	// StageAllocation: a create's wait in the dispatcher until its batch commits.
	StageAllocation Stage = iota
	// StageSubmit: a transaction's allocation to its first broadcast a node
	// accepted.
	StageSubmit
	// StageBroadcast: one batched sendRawTransaction call.
	StageBroadcast
	// StageReceipt: a transaction's first accepted broadcast to its receipt
	// being recorded (MINED).
	StageReceipt
	// StageConfirmation: a transaction's creation to its final outcome
	// (CONFIRMED or FAILED_FINAL).
	StageConfirmation
)

// NopRecorder records nothing: the recorder of code that is not measured.
type NopRecorder struct{}

var _ Recorder = NopRecorder{}

func (NopRecorder) TxCreate(context.Context, string, int)                  {}
func (NopRecorder) CreateLatency(context.Context, string, float64)         {}
func (NopRecorder) Latency(context.Context, Stage, float64)                {}
func (NopRecorder) QueueDepth(context.Context, int64)                      {}
func (NopRecorder) TxSubmit(context.Context, string)                       {}
func (NopRecorder) ReceiptCheck(context.Context, string)                   {}
func (NopRecorder) OutcomeContradicted(context.Context, string)            {}
func (NopRecorder) Reorg(context.Context)                                  {}
func (NopRecorder) Resubmit(context.Context, string)                       {}
func (NopRecorder) BumpDecision(context.Context, string)                   {}
func (NopRecorder) Refused(context.Context, string)                        {}
func (NopRecorder) PendingOldest(context.Context, uint64, string, float64) {}
func (NopRecorder) Delegated(context.Context, uint64, string, bool)        {}

func (NopRecorder) StartSpan(ctx context.Context, _ string) (context.Context, Span) {
	return ctx, NopSpan{}
}

func (NopRecorder) StartClientSpan(ctx context.Context, _ string) (context.Context, Span) {
	return ctx, NopSpan{}
}

// NopSpan is a span that records nothing.
type NopSpan struct{}

func (NopSpan) End()                   {}
func (NopSpan) Recording() bool        { return false }
func (NopSpan) SetResult(string, bool) {}
func (NopSpan) SetInt(string, int)     {}
func (NopSpan) Link(context.Context)   {}
