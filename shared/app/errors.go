package app

import "errors"

// Sentinel errors, every one of the use cases'. Callers check them with
// errors.Is; the functions map the exported ones to their answers.
var (
	// ErrNotMined means some of the signer's broadcast transactions have
	// no receipt yet: waiting, not failing (the finality sweep checks
	// those whose receipt check went stale).
	ErrNotMined = errors.New("not mined yet")

	// ErrNoLease means another invocation holds the signer's chain lease:
	// waiting, not failing.
	ErrNoLease = errors.New("signer busy: chain lease held elsewhere")

	// ErrNotServed means this deployment has no chain or no key for the
	// prompt's signer: no retry can help, so the prompt is acknowledged.
	ErrNotServed = errors.New("signer not served here")

	// ErrChainUnavailable means the chain could not be asked for what
	// allocation needed (the pending nonce, a gas estimate); nothing was
	// written.
	ErrChainUnavailable = errors.New("chain unavailable")

	// errSuggestFees means the chain could not suggest fees for the first
	// signing of a batch: nothing was signed.
	errSuggestFees = errors.New("suggest fees")

	// errNotNeeded: a waiter's work was done by another while it waited.
	errNotNeeded = errors.New("no longer needed")

	// errFeesTooLow refuses an admin's fees that do not beat the last
	// attempt; errFeesTooHigh fees above what the transaction may pay (its
	// fee ceiling, the chain's cap, the nodes' cap on a whole transaction's
	// fee).
	errFeesTooLow  = errors.New("fees too low to replace the last attempt")
	errFeesTooHigh = errors.New("fees above what the transaction may pay")
)
