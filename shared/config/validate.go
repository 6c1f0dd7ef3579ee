package config

import (
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/txfence/txfence/shared/txm"
)

// Validate checks a Config built in code (tests, the emulator) by the same
// rules Load applies.
func (c Config) Validate() error {
	if errs := c.validate(); len(errs) > 0 {
		return &Error{Problems: errs}
	}
	return nil
}

// validate returns one problem per bad setting, naming its variable.
func (c Config) validate() []Problem {
	var ps []Problem
	bad := func(env, format string, args ...any) {
		ps = append(ps, Problem{Var: env, Message: fmt.Sprintf(format, args...)})
	}
	c.validateShards(bad)
	c.validateProfiles(bad)
	if c.Database.MaxConns < 1 {
		bad(EnvDBMaxConns, "must be at least 1, got %d", c.Database.MaxConns)
	}
	for _, t := range []struct {
		env string
		v   time.Duration
	}{{EnvDBStatementTimeout, c.Database.StatementTimeout}, {EnvDBLockTimeout, c.Database.LockTimeout}, {EnvDBIdleInTxTimeout, c.Database.IdleInTxTimeout}} {
		if t.v <= 0 || t.v > time.Hour {
			bad(t.env, "must be between 0 and 1h, got %s", t.v)
		}
	}
	if c.Database.LockTimeout >= c.Database.StatementTimeout && c.Database.LockTimeout > 0 {
		bad(EnvDBLockTimeout, "must be shorter than %s (%s)", EnvDBStatementTimeout, c.Database.StatementTimeout)
	}
	c.validateAuth(bad)
	if c.Lease.Duration <= 0 {
		bad(EnvLeaseDuration, "must be positive, got %s", c.Lease.Duration)
	}
	if c.Lease.RenewEvery <= 0 || (c.Lease.Duration > 0 && c.Lease.RenewEvery >= c.Lease.Duration) {
		bad(EnvLeaseRenew, "must be positive and shorter than %s (%s), got %s", EnvLeaseDuration, c.Lease.Duration, c.Lease.RenewEvery)
	}
	if c.Lease.ClockSkew < 0 {
		bad(EnvClockSkew, "must not be negative, got %s", c.Lease.ClockSkew)
	}
	if len(c.Chains) == 0 && !c.NoChains {
		bad(EnvChains, "is required: at least one chain, as CHAIN_ID=RPC_URL[|RPC_URL...][,CHAIN_ID=...] (or none, for a process that dials no chain)")
	}
	if len(c.Signers) == 0 {
		bad(EnvSigners, "is required: at least one signer, as ADDRESS[=KEY_REF][,...]")
	}
	c.validateSendOnly(bad)
	if c.NonceStateTimeout <= 0 {
		bad(EnvNonceStateTimeout, "must be positive, got %s", c.NonceStateTimeout)
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		bad(EnvBatchSize, "must be between 1 and 10000, got %d", c.BatchSize)
	}
	if c.BatchWait < 0 || c.BatchWait > time.Second {
		bad(EnvBatchWait, "must be between 0 and 1s, got %s", c.BatchWait)
	}
	if c.ContendedWait < 0 || c.ContendedWait > time.Second {
		bad(EnvContendedWait, "must be between 0 and 1s, got %s", c.ContendedWait)
	}
	if c.Workers < 1 || c.Workers > 4096 {
		bad(EnvWorkers, "must be between 1 and 4096, got %d", c.Workers)
	}
	if c.MaxGasLimit < 21000 {
		bad(EnvMaxGasLimit, "must be at least 21000, got %d", c.MaxGasLimit)
	}
	if c.MaxDataBytes < 0 {
		bad(EnvMaxDataBytes, "must not be negative, got %d", c.MaxDataBytes)
	}
	if c.MaxFeeCap == nil || c.MaxFeeCap.Sign() <= 0 {
		bad(EnvMaxFeeCap, "must be a positive number of wei")
	}
	if c.MaxTipCap != nil && c.MaxTipCap.Sign() <= 0 {
		bad(EnvMaxTipCap, "must be a positive number of wei")
	}
	if c.MinPriorityFee == nil || c.MinPriorityFee.Sign() < 0 {
		bad(EnvMinPriorityFee, "must be a non-negative number of wei")
	}
	if c.TxFeeCap != nil && c.TxFeeCap.Sign() < 0 {
		bad(EnvTxFeeCap, "must be a non-negative number of wei (0: none)")
	}
	if c.MaxBumps < 0 || c.MaxBumps > 1000 {
		bad(EnvMaxBumps, "must be between 0 and 1000, got %d", c.MaxBumps)
	}
	if c.BumpAfter <= 0 {
		bad(EnvBumpAfter, "must be positive, got %s", c.BumpAfter)
	}
	if c.BumpPercent < txm.MinBumpPercent || c.BumpPercent > 1000 {
		bad(EnvBumpPercent, "must be between %d (the nodes' replacement rule) and 1000, got %d", txm.MinBumpPercent, c.BumpPercent)
	}
	tipCapOK := c.MaxTipCap == nil || c.MaxTipCap.Sign() > 0
	feesOK := c.MaxFeeCap != nil && c.MaxFeeCap.Sign() > 0 && c.MinPriorityFee != nil && c.MinPriorityFee.Sign() >= 0 && tipCapOK
	if feesOK && (c.MinPriorityFee.Cmp(c.MaxFeeCap) > 0 || c.MaxTipCap != nil && c.MinPriorityFee.Cmp(c.MaxTipCap) > 0) {
		bad(EnvMinPriorityFee, "the tip floor %s wei is above the tip cap or the fee cap", c.MinPriorityFee)
	}
	for id := range c.ChainFees {
		if _, ok := c.Chain(id); !ok && !c.NoChains {
			bad(EnvChainFees, "chain %d is not in %s", id, EnvChains)
			continue
		}
		if !feesOK {
			continue // the global settings are reported above
		}
		c.validateChainFees(id, EnvChainFees, bad)
	}
	for id := range c.ChainProfiles {
		if _, ok := c.Chain(id); feesOK && (ok || c.NoChains) {
			c.validateChainFees(id, EnvChainProfiles, bad)
		}
	}
	if c.MaxInFlight < 1 {
		bad(EnvMaxInFlight, "must be at least 1, got %d", c.MaxInFlight)
	}
	if c.DelegatedMaxInFlight < 1 {
		bad(EnvDelegatedMaxInFlight, "must be at least 1, got %d", c.DelegatedMaxInFlight)
	}
	if c.RPCMaxBatch < 1 {
		bad(EnvRPCMaxBatch, "must be at least 1, got %d", c.RPCMaxBatch)
	}
	if c.ResubmitBudget <= 0 {
		bad(EnvResubmitBudget, "must be positive, got %s", c.ResubmitBudget)
	}
	if c.ResubmitPass <= 0 {
		bad(EnvResubmitPass, "must be positive, got %s", c.ResubmitPass)
	}
	if c.RetryBackoffMin <= 0 {
		bad(EnvRetryBackoffMin, "must be positive, got %s", c.RetryBackoffMin)
	}
	if c.RetryBackoffMax < c.RetryBackoffMin {
		bad(EnvRetryBackoffMax, "must be at least %s (%s), got %s", EnvRetryBackoffMin, c.RetryBackoffMin, c.RetryBackoffMax)
	}
	webhookRules := false
	for _, r := range c.StuckPolicy {
		webhookRules = webhookRules || r.Action == StuckWebhookAction
	}
	if webhookRules && c.StuckWebhook.URL == "" {
		bad(EnvStuckWebhookURL, "is required when %s uses %q", EnvStuckPolicy, StuckWebhookAction)
	}
	if c.StuckWebhook.URL != "" {
		if u, err := url.Parse(c.StuckWebhook.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad(EnvStuckWebhookURL, "must be an http(s) URL with a host")
		}
		if len(c.StuckWebhook.Secret) < 16 {
			bad(EnvStuckWebhookSecret, "must be at least 16 characters when %s is set", EnvStuckWebhookURL)
		}
	}
	if c.StuckWebhook.Timeout <= 0 || c.StuckWebhook.Timeout > time.Minute {
		bad(EnvStuckWebhookTimeout, "must be between 0 and 1m, got %s", c.StuckWebhook.Timeout)
	}
	if c.SubmitBudget <= 0 {
		bad(EnvSubmitBudget, "must be positive, got %s", c.SubmitBudget)
	}
	if c.ResubmitInterval <= 0 {
		bad(EnvResubmitInterval, "must be positive, got %s", c.ResubmitInterval)
	}
	if c.RecheckAfter <= 0 {
		bad(EnvRecheckAfter, "must be positive, got %s", c.RecheckAfter)
	}
	if c.MaxRebroadcasts < 1 {
		bad(EnvMaxRebroadcasts, "must be at least 1, got %d", c.MaxRebroadcasts)
	}
	if c.StuckAfter <= 0 {
		bad(EnvStuckAfter, "must be positive, got %s", c.StuckAfter)
	}
	if c.ReceiptWait < 0 || c.ReceiptWait > 10*time.Minute {
		bad(EnvReceiptWait, "must be between 0 and 10m, got %s", c.ReceiptWait)
	}
	if c.ReceiptWorkers < 1 {
		bad(EnvReceiptWorkers, "must be at least 1, got %d", c.ReceiptWorkers)
	}
	if c.StaleReceiptTimeout <= 0 {
		bad(EnvStaleReceiptTimeout, "must be positive, got %s", c.StaleReceiptTimeout)
	}
	if c.FinalityMode != FinalityConfirmations && c.FinalityMode != FinalityFinalized {
		bad(EnvFinalityMode, "must be %q or %q, got %q", FinalityConfirmations, FinalityFinalized, c.FinalityMode)
	}
	if c.FinalityMode == FinalityConfirmations && c.Confirmations < 1 {
		bad(EnvConfirmations, "must be at least 1 in %q mode, got %d", FinalityConfirmations, c.Confirmations)
	}
	if c.FinalityBudget <= 0 {
		bad(EnvFinalityBudget, "must be positive, got %s", c.FinalityBudget)
	}
	if c.ReorgWatch < 0 {
		bad(EnvReorgWatch, "must not be negative, got %s", c.ReorgWatch)
	}
	if c.FinalityInterval <= 0 {
		bad(EnvFinalityInterval, "must be positive, got %s", c.FinalityInterval)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad(EnvLogLevel, "must be one of debug, info, warn, error; got %q", c.LogLevel)
	}
	c.validateTelemetry(bad)
	for _, t := range []struct{ env, v string }{{EnvTopicSubmit, c.TopicSubmit}, {EnvTopicReceipt, c.TopicReceipt}, {EnvTopicCompletion, c.TopicCompletion}} {
		if t.v == "" {
			bad(t.env, "must not be empty")
		}
	}
	return ps
}

// Problem is one bad setting.
type Problem struct {
	Var     string
	Message string
}

// Error lists every bad setting found by one Load.
type Error struct{ Problems []Problem }

func (e *Error) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = "  " + p.Var + " " + p.Message
	}
	return fmt.Sprintf("configuration has %d problem(s):\n%s", len(e.Problems), strings.Join(lines, "\n"))
}

// Vars returns the names of the bad variables, sorted.
func (e *Error) Vars() []string {
	vs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		vs[i] = p.Var
	}
	sort.Strings(vs)
	return vs
}

// ErrConfig matches every *Error under errors.Is.
var ErrConfig = errors.New("invalid configuration")

// Is makes *Error match ErrConfig.
func (e *Error) Is(target error) bool { return target == ErrConfig }

// validateChainFees checks chain id's resolved fees against the global fee
// cap and each other, blaming env.
func (c Config) validateChainFees(id uint64, env string, bad func(env, format string, args ...any)) {
	f := c.FeesFor(id)
	if f.MaxFee.Cmp(c.MaxFeeCap) > 0 {
		bad(env, "chain %d: maxFee %s is above %s (%s)", id, f.MaxFee, EnvMaxFeeCap, c.MaxFeeCap)
	}
	if f.MinTip.Cmp(f.MaxTip) > 0 || f.MinTip.Cmp(f.MaxFee) > 0 {
		bad(env, "chain %d: the tip floor %s wei is above the tip cap %s or the fee cap %s", id, f.MinTip, f.MaxTip, f.MaxFee)
	}
}
