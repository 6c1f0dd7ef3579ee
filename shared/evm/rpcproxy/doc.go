// Package rpcproxy is an in-process HTTP reverse proxy for Ethereum JSON-RPC,
// for tests: it sits between a client and a real node (e.g. evmtest's
// simulated chain), records every call it receives and injects the faults a
// healthy node never produces — JSON-RPC errors, HTTP error statuses, delays,
// dropped connections, null results and swallowed broadcasts (answered as
// accepted, never forwarded).
//
// Single requests and batches (JSON arrays) are both understood; rules apply
// per call, so one element of a batch can be answered by a fault while the
// others are forwarded upstream as a smaller batch. WebSocket is not
// supported.
package rpcproxy
