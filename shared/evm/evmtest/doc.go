// Package evmtest runs a development EVM chain for tests and local tools:
// go-ethereum's simulated backend (chain id 1337), served over HTTP JSON-RPC
// on 127.0.0.1 so that any client, in this process or another, reaches it by
// URL. Blocks are sealed on demand (Commit) or by a ticker (StartMining).
//
// Everything here is for development only: the keys from DevKeys are public.
package evmtest
