package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// DevPrincipal is the caller of development mode: every role, every signer,
// no caps.
var DevPrincipal = txm.Principal{ID: "dev", Via: "dev"}

// devPolicy is what DevPrincipal may do. A gas limit it gives is not
// estimated (as a policy may allow), so that development and tests can
// send what a node would refuse or fail (a transfer the signer cannot pay).
var devPolicy = txm.Policy{Principal: "dev", Roles: txm.Roles, AllSigners: true, SkipEstimation: true}

// Policies answers what a principal may do: its current policy from the
// store, kept per instance for ttl (a change reaches every instance within
// it), or no role at all when it has none — txfence is closed by default.
// It also writes the audit trail of refusals.
type Policies struct {
	store   txm.PolicyStore
	audit   txm.AuditLog
	ttl     time.Duration
	metrics txm.Recorder
	log     *slog.Logger

	mu    sync.Mutex
	cache map[string]cachedPolicy
}

type cachedPolicy struct {
	p       txm.Policy
	fetched time.Time
}

// policyTTL is how long a policy is trusted before it is read again.
const policyTTL = 5 * time.Second

// NewPolicies returns the policy source. audit may be nil (no audit rows).
func NewPolicies(store txm.PolicyStore, audit txm.AuditLog, m txm.Recorder, log *slog.Logger) (*Policies, error) {
	if store == nil || log == nil {
		return nil, errors.New("new policies: store and logger are required")
	}
	return &Policies{store: store, audit: audit, ttl: policyTTL, metrics: recorderOr(m), log: log, cache: map[string]cachedPolicy{}}, nil
}

// For is who's policy. Only an unreachable store is an error.
func (p *Policies) For(ctx context.Context, who txm.Principal) (txm.Policy, error) {
	if who == DevPrincipal {
		return devPolicy, nil
	}
	p.mu.Lock()
	c, ok := p.cache[who.ID]
	p.mu.Unlock()
	if ok && time.Since(c.fetched) < p.ttl {
		return c.p, nil
	}
	pol, err := p.store.Policy(ctx, who.ID)
	switch {
	case errors.Is(err, txm.ErrNotFound):
		pol = txm.Policy{Principal: who.ID} // no role: closed by default
	case err != nil:
		return txm.Policy{}, err
	}
	p.mu.Lock()
	p.cache[who.ID] = cachedPolicy{p: pol, fetched: time.Now()}
	p.mu.Unlock()
	return pol, nil
}

// Forget drops a cached policy (this instance just changed it).
func (p *Policies) Forget(principal string) {
	p.mu.Lock()
	delete(p.cache, principal)
	p.mu.Unlock()
}

// AuthorizeSend is pol.CheckSend with its refusal recorded as CreateTx
// records one. The API asks it before it spends the signer's rate limit on a
// create, so that a principal without rights on a signer cannot spend that
// signer's budget.
func (p *Policies) AuthorizeSend(ctx context.Context, who txm.Principal, pol txm.Policy, r *txm.Request) error {
	err := pol.CheckSend(r)
	if err != nil {
		p.Refused(ctx, who, "create", txm.CanonicalAddress(r.From), err)
	}
	return err
}

// Refused records a refusal: a log line and an audit row (its failure is
// logged, never the caller's problem). target names what was asked for.
func (p *Policies) Refused(ctx context.Context, who txm.Principal, action, target string, err error) {
	outcome := "refused"
	var r *txm.Refusal
	if errors.As(err, &r) {
		outcome = "refused:" + r.Rule
	}
	p.metrics.Refused(ctx, outcome)
	p.log.WarnContext(ctx, "refused", slog.String(logging.KeyPrincipal, who.ID), slog.String("action", action),
		slog.String("target", target), slog.String("outcome", outcome))
	p.Audit(ctx, txm.AuditEntry{Principal: who.ID, Action: action, Target: target, Outcome: outcome, Detail: detailOf(err)})
}

// Audit writes an audit row, logging (not returning) a failure to.
func (p *Policies) Audit(ctx context.Context, e txm.AuditEntry) {
	if p.audit == nil {
		return
	}
	if err := p.audit.Audit(context.WithoutCancel(ctx), e); err != nil {
		p.log.WarnContext(ctx, "audit", slog.String("action", e.Action), slog.Any("error", err))
	}
}

func detailOf(err error) string {
	var r *txm.Refusal
	if errors.As(err, &r) {
		return r.Detail
	}
	return ""
}
