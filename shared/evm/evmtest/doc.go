// Package evmtest runs a development EVM chain for tests and local tools:
// go-ethereum's simulated backend (chain id 1337), served over HTTP JSON-RPC
// on 127.0.0.1 so that any client, in this process or another, reaches it by
// URL. Blocks are sealed on demand (Commit) or by a ticker (StartMining).
// Test contracts written in Solidity (ERC-20, ERC-721, ERC-1155, Reverter,
// Forwarder) come compiled and embedded, with helpers to deploy and call
// them (ERC20, Chain.MustDeploy, Contract.Pack, Chain.MustTransact).
//
// Everything here is for development only: the keys from DevKeys are public.
package evmtest
