package evm

import "errors"

// Sentinel errors of the adapter; the chain's refusals become
// txm.BroadcastReasons and txm's typed errors (classify.go) instead.
var (
	// ErrWrongChain means an endpoint serves a different chain than
	// configured.
	ErrWrongChain = errors.New("endpoint serves another chain")

	// ErrNoFinalized means the node reports no block under the finalized
	// tag.
	ErrNoFinalized = errors.New("no finalized block")
)
