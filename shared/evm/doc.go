// Package evm is the chain adapter over go-ethereum's RPC client: it
// implements the chain ports of shared/txm, and classifies broadcast errors
// into txm's closed set in one place.
//
// A Client talks to one or more JSON-RPC endpoints of the same chain (their
// chain ids are checked), with a timeout on every call. It follows each
// endpoint's head and reads from the healthiest: one that lags the best
// head by more than LagBlocks, or that failed at the transport level (then
// retried with backoff), is passed over while another answers, and a call
// fails over to the next endpoint when one cannot be reached; a JSON-RPC
// error is the node's answer and is returned as it came. Receipts and
// headers are fetched in one batch per call. Broadcasts go to every
// healthy endpoint at once, and to send-only endpoints (a broadcast node,
// or a private submission URL a signer's route names).
//
// Simulate runs calls against the latest state (eth_simulateV1 with
// transfer tracing, or eth_call and eth_estimateGas where the node lacks
// it) and DecodeEffects reads what they move from their logs.
package evm
