// Package stuckpolicy is the static stuck-resolution policy: it reads the
// action for a STUCK transaction from the configured rules (TXFENCE_STUCK_POLICY),
// the most specific rule winning, and hands the transaction to the webhook
// policy where a rule says "webhook".
package stuckpolicy

import (
	"context"
	"fmt"
	"strconv"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
	"github.com/txfence/txfence/shared/webhook"
)

// By names this policy in a Resolution, for the audit trail.
const By = "static"

// Policy is the static policy. Build it with New or FromConfig.
type Policy struct {
	// rules holds only the stuck rules of the configuration, so that the
	// policy keeps no secret; config.StuckActionFor decides the action.
	rules   config.Config
	webhook txm.StuckResolutionHook
}

var _ txm.StuckResolutionHook = (*Policy)(nil)

// New builds the static policy from cfg.StuckPolicy. hook (the webhook
// policy) answers for the transactions a "webhook" rule covers; it may be
// nil when no rule says "webhook". A rule with an unknown action is an error.
func New(cfg config.Config, hook txm.StuckResolutionHook) (txm.StuckResolutionHook, error) {
	rules := append([]config.StuckRule(nil), cfg.StuckPolicy...)
	for _, r := range rules {
		if r.Action == config.StuckWebhookAction {
			if hook == nil {
				return nil, fmt.Errorf("new stuck policy: rule %s asks the webhook, and none is configured", ruleName(r))
			}
			continue
		}
		if _, err := txm.ParseStuckAction(r.Action); err != nil {
			return nil, fmt.Errorf("new stuck policy: rule %s: %w", ruleName(r), err)
		}
	}
	return &Policy{rules: config.Config{StuckPolicy: rules}, webhook: hook}, nil
}

// FromConfig builds the whole stuck-resolution policy from cfg: the webhook
// client when cfg.StuckWebhook.URL is set, and the static policy over it.
func FromConfig(cfg config.Config) (txm.StuckResolutionHook, error) {
	var hook txm.StuckResolutionHook
	if w := cfg.StuckWebhook; w.URL != "" {
		c, err := webhook.New(w.URL, []byte(w.Secret), w.Timeout)
		if err != nil {
			return nil, fmt.Errorf("stuck policy from config: %w", err)
		}
		hook = c
	}
	return New(cfg, hook)
}

// Resolve returns the action of the most specific rule for t's chain and
// signer (noop when none matches), or the webhook's answer when that action
// is "webhook". Only the webhook can fail.
func (p *Policy) Resolve(ctx context.Context, t txm.StuckTx) (txm.Resolution, error) {
	name := p.rules.StuckActionFor(t.ChainID, t.Signer)
	if name == config.StuckWebhookAction {
		return p.webhook.Resolve(ctx, t)
	}
	action, err := txm.ParseStuckAction(name)
	if err != nil {
		// New has checked every rule; this is a bug, and no decision.
		return txm.Resolution{}, fmt.Errorf("resolve stuck tx %s: %w", t.TxID, err)
	}
	reason := "no stuck rule matches: default " + name
	if r, ok := p.rules.StuckRuleFor(t.ChainID, t.Signer); ok {
		reason = "stuck rule " + ruleName(r)
	}
	return txm.Resolution{Action: action, Reason: reason, By: By}, nil
}

// ruleName writes r as TXFENCE_STUCK_POLICY spells it: SCOPE=ACTION.
func ruleName(r config.StuckRule) string {
	scope := "*"
	switch {
	case r.Signer != nil && r.ChainID != 0:
		scope = strconv.FormatUint(r.ChainID, 10) + ":" + r.Signer.Hex()
	case r.Signer != nil:
		scope = r.Signer.Hex()
	case r.ChainID != 0:
		scope = strconv.FormatUint(r.ChainID, 10)
	}
	return scope + "=" + r.Action
}
