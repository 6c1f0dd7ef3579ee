package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// delegationTTL is how long a signer's delegation, as its account's code
// or a node's refusal said it, is trusted before the code is read again:
// a delegation is set or cleared by a transaction of its own, rarely, and
// a refusal tells sooner than the next read anyway.
const delegationTTL = time.Minute

// delegations remembers, per chain and signer, whether the account
// carries an EIP-7702 delegation, for this process's drains.
type delegations struct {
	mu      sync.Mutex
	entries map[txm.LeaseKey]delegation
}

type delegation struct {
	delegated bool
	at        time.Time
}

// get returns what is remembered of key and whether it is fresh.
func (ds *delegations) get(key txm.LeaseKey) (delegation, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	e, ok := ds.entries[key]
	return e, ok && time.Since(e.at) < delegationTTL
}

func (ds *delegations) set(key txm.LeaseKey, delegated bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.entries == nil {
		ds.entries = make(map[txm.LeaseKey]delegation)
	}
	ds.entries[key] = delegation{delegated: delegated, at: time.Now()}
}

// inFlightLimit is the signer's in-flight limit for this drain: the
// delegated limit when its account carries an EIP-7702 delegation (nodes
// hold one executable transaction of such a sender), maxInFlight
// otherwise. The account's code is read when the remembered answer is
// older than delegationTTL; a failed read keeps the last answer, since a
// refusal from the node corrects it anyway.
func (d *DrainSigner) inFlightLimit(ctx context.Context, key txm.LeaseKey, chain txm.Chain, log *slog.Logger) int {
	e, fresh := d.delegations.get(key)
	if r, ok := chain.(txm.DelegationReader); ok && !fresh {
		delegated, err := r.Delegated(ctx, key.Signer)
		if err != nil {
			log.WarnContext(ctx, "could not read whether the signer is delegated", slog.Any("error", err))
		} else {
			d.noteDelegated(ctx, key, delegated, log)
			e.delegated = delegated
		}
	}
	limit, delegated := d.cfg.InFlight(key.ChainID)
	if e.delegated {
		return max(1, min(delegated, limit))
	}
	return limit
}

// noteDelegated remembers what was learnt of the signer's delegation and
// sets its gauge, logging a change (log names the signer).
func (d *DrainSigner) noteDelegated(ctx context.Context, key txm.LeaseKey, delegated bool, log *slog.Logger) {
	before, _ := d.delegations.get(key)
	d.delegations.set(key, delegated)
	d.metrics.Delegated(ctx, key.ChainID, txm.CanonicalAddress(key.Signer), delegated)
	if before.delegated != delegated {
		_, limit := d.cfg.InFlight(key.ChainID)
		log.InfoContext(ctx, "signer delegation changed", slog.Bool("delegated", delegated),
			slog.Int("delegated_max_in_flight", limit))
	}
}
