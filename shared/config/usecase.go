package config

import (
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// The use cases of shared/app each take the part of Config they read, so
// that a new setting reaches only the code that needs it. Config's methods
// of the same names build them.

// Attempts is what making a transaction's later attempts (replacements,
// cancels, re-signings after a failure) reads.
type Attempts struct {
	Fees        Fees
	BumpPercent int           // each replacement pays at least this much more
	BackoffMin  time.Duration // first wait after a failed round of work on a transaction
	BackoffMax  time.Duration // longest wait between rounds
}

// Attempts is what c gives the making of later attempts.
func (c Config) Attempts() Attempts {
	return Attempts{Fees: c.Fees(), BumpPercent: c.BumpPercent, BackoffMin: c.RetryBackoffMin, BackoffMax: c.RetryBackoffMax}
}

// Create is what creating a transaction reads: which chains and signers
// are configured, the request caps, and the dispatcher's batching.
type Create struct {
	InstanceID        string
	ChainIDs          []uint64
	Signers           []Signer
	signerAt          map[common.Address]int // see Config.signerAt
	MaxGasLimit       uint64
	MaxDataBytes      int
	Fees              Fees
	NonceStateTimeout time.Duration
	Workers           int
	BatchSize         int
	BatchWait         time.Duration
	ContendedWait     time.Duration
	// SendVia is, per chain id, the routes a create may name (Config.SendVia).
	SendVia map[uint64][]string
}

// Create is what c gives creating a transaction.
func (c Config) Create() Create {
	ids := make([]uint64, len(c.Chains))
	via := make(map[uint64][]string, len(c.Chains))
	for i, ch := range c.Chains {
		ids[i] = ch.ID
		via[ch.ID] = c.SendVia(ch.ID)
	}
	return Create{SendVia: via, InstanceID: c.InstanceID, ChainIDs: ids, Signers: c.Signers, signerAt: c.signerAt, MaxGasLimit: c.MaxGasLimit,
		MaxDataBytes: c.MaxDataBytes, Fees: c.Fees(), NonceStateTimeout: c.NonceStateTimeout, Workers: c.Workers,
		BatchSize: c.BatchSize, BatchWait: c.BatchWait, ContendedWait: c.ContendedWait}
}

// HasChain reports whether chain id is configured.
func (c Create) HasChain(id uint64) bool {
	for _, have := range c.ChainIDs {
		if have == id {
			return true
		}
	}
	return false
}

// Signer returns the configured signer for addr, if any.
func (c Create) Signer(addr common.Address) (Signer, bool) {
	return signerIn(c.Signers, c.signerAt, addr)
}

// Drain is what draining a signer's allocated transactions reads.
type Drain struct {
	InstanceID   string
	RenewEvery   time.Duration // how often the lease holder renews
	SubmitBudget time.Duration
	MaxInFlight  int
	// DelegatedMaxInFlight is MaxInFlight for a signer with an EIP-7702
	// delegation.
	DelegatedMaxInFlight int
	StuckAfter           time.Duration
	Attempts             Attempts
	profiles             profiles
}

// InFlight is chain id's in-flight limits: a signer's, and a delegated
// signer's.
func (d Drain) InFlight(id uint64) (limit, delegated int) {
	if p, ok := d.profiles.named(id); ok {
		return p.MaxInFlight, p.DelegatedMaxInFlight
	}
	return d.MaxInFlight, d.DelegatedMaxInFlight
}

// Drain is what c gives draining a signer.
func (c Config) Drain() Drain {
	return Drain{InstanceID: c.InstanceID, RenewEvery: c.Lease.RenewEvery, SubmitBudget: c.SubmitBudget, MaxInFlight: c.MaxInFlight,
		DelegatedMaxInFlight: c.DelegatedMaxInFlight, StuckAfter: c.StuckAfter, Attempts: c.Attempts(), profiles: c.profiles()}
}

// Receipts is what checking a signer's receipts reads.
type Receipts struct {
	InstanceID       string
	RenewEvery       time.Duration // how often the lease holder renews
	FinalityInterval time.Duration // the head is asked for at a fifth of it
	ReceiptWait      time.Duration
}

// Receipts is what c gives checking receipts.
func (c Config) Receipts() Receipts {
	return Receipts{InstanceID: c.InstanceID, RenewEvery: c.Lease.RenewEvery, FinalityInterval: c.FinalityInterval,
		ReceiptWait: c.ReceiptWait}
}

// Finality is what the finality sweep reads.
type Finality struct {
	InstanceID          string
	RenewEvery          time.Duration // how often the lease holder renews
	FinalityMode        FinalityMode
	Confirmations       uint64
	ReorgWatch          time.Duration
	StaleReceiptTimeout time.Duration
	ReceiptWorkers      int
	profiles            profiles
	// confirmationsNamed: a chain profile finalizes by depth.
	confirmationsNamed bool
}

// WatchesReorgs reports whether any chain's transactions become final by
// depth, the only mode whose final blocks may still reorg.
func (f Finality) WatchesReorgs() bool {
	return f.FinalityMode == FinalityConfirmations || f.confirmationsNamed
}

// For is how chain id's transactions become final.
func (f Finality) For(id uint64) (FinalityMode, uint64) {
	if p, ok := f.profiles.named(id); ok {
		return p.FinalityMode, p.Confirmations
	}
	return f.FinalityMode, f.Confirmations
}

// Finality is what c gives the finality sweep.
func (c Config) Finality() Finality {
	return Finality{InstanceID: c.InstanceID, RenewEvery: c.Lease.RenewEvery, FinalityMode: c.FinalityMode,
		Confirmations: c.Confirmations, ReorgWatch: c.ReorgWatch, StaleReceiptTimeout: c.StaleReceiptTimeout,
		ReceiptWorkers: c.ReceiptWorkers, profiles: c.profiles(), confirmationsNamed: c.confirmationsNamed()}
}

// Resubmit is what the resubmit sweep reads.
type Resubmit struct {
	InstanceID       string
	RenewEvery       time.Duration // how often the lease holder renews
	ResubmitInterval time.Duration
	RecheckAfter     time.Duration
	BumpAfter        time.Duration
	MaxRebroadcasts  int
	StuckAfter       time.Duration
	Attempts         Attempts
	profiles         profiles
	// bumpAfterMin is the shortest BumpAfter over every chain.
	bumpAfterMin time.Duration
}

// BumpAfterFor is chain id's BumpAfter.
func (r Resubmit) BumpAfterFor(id uint64) time.Duration {
	if p, ok := r.profiles.named(id); ok {
		return p.BumpAfter
	}
	return r.BumpAfter
}

// ShortestBumpAfter is the shortest BumpAfter of any chain: how soon the
// sweep must look at a signer's oldest broadcast.
func (r Resubmit) ShortestBumpAfter() time.Duration {
	if r.bumpAfterMin > 0 && r.bumpAfterMin < r.BumpAfter {
		return r.bumpAfterMin
	}
	return r.BumpAfter
}

// Resubmit is what c gives the resubmit sweep.
func (c Config) Resubmit() Resubmit {
	return Resubmit{InstanceID: c.InstanceID, RenewEvery: c.Lease.RenewEvery, ResubmitInterval: c.ResubmitInterval,
		RecheckAfter: c.RecheckAfter, BumpAfter: c.BumpAfter, MaxRebroadcasts: c.MaxRebroadcasts, StuckAfter: c.StuckAfter,
		Attempts: c.Attempts(), profiles: c.profiles(), bumpAfterMin: c.shortestBumpAfter()}
}

// confirmationsNamed reports whether a named chain's profile finalizes by
// depth.
func (c Config) confirmationsNamed() bool {
	for id := range c.ChainProfiles {
		if c.Profile(id).FinalityMode == FinalityConfirmations {
			return true
		}
	}
	return false
}

// shortestBumpAfter is the shortest BumpAfter over the named chains'
// profiles (0: none names one).
func (c Config) shortestBumpAfter() time.Duration {
	var least time.Duration
	for id := range c.ChainProfiles {
		if d := c.Profile(id).BumpAfter; least == 0 || d < least {
			least = d
		}
	}
	return least
}
