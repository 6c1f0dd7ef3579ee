// Package app holds txfence's use cases, one file per command or query. They
// depend on the ports of shared/txm only; adapters are injected.
package app
