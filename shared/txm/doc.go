// Package txm is the transaction manager's domain: transactions and their
// states, leases and fencing, the errors callers check with errors.Is, and
// the ports (interfaces) that the adapters in shared/postgres, shared/evm,
// shared/pubsub and shared/metrics implement. It imports no database, RPC,
// messaging or telemetry client.
package txm
