// Package evm is the chain adapter over go-ethereum's RPC client: it
// implements the chain ports of shared/txm, and classifies broadcast errors
// into txm's closed set in one place.
package evm
