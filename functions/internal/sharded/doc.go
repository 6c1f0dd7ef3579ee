// Package sharded holds the end-to-end tests of a deployment whose signers
// are spread over several PostgreSQL servers (TXFENCE_DATABASES): the
// processes are built by the production wiring (deps.Build and each
// function's Build) over two real servers and a simulated chain.
package sharded
