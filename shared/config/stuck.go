package config

import (
	"log/slog"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/redact"
)

// StuckRule picks the stuck-resolution action for the STUCK transactions of
// a chain (ChainID 0: any) and signer (nil: any). The most specific rule
// wins: chain and signer, then signer, then chain, then the default.
type StuckRule struct {
	ChainID uint64
	Signer  *common.Address
	Action  string // noop, bump, cancel, placeholder or webhook
}

// StuckWebhook is where the webhook stuck-resolution policy asks. Secret
// signs requests and verifies answers (HMAC-SHA256); it is never logged.
type StuckWebhook struct {
	URL     string
	Secret  string
	Timeout time.Duration
}

// StuckWebhookAction is the StuckRule action that asks the webhook.
const StuckWebhookAction = "webhook"

// StuckRuleFor is the most specific StuckRule for the STUCK transactions
// of signer on chain id (chain and signer, then signer, then chain, then
// "*"; the first of equals), and whether any matches.
func (c Config) StuckRuleFor(id uint64, signer common.Address) (StuckRule, bool) {
	var best StuckRule
	score := -1
	for _, r := range c.StuckPolicy {
		if r.ChainID != 0 && r.ChainID != id || r.Signer != nil && *r.Signer != signer {
			continue
		}
		s := 0
		if r.Signer != nil {
			s += 2
		}
		if r.ChainID != 0 {
			s++
		}
		if s > score {
			best, score = r, s
		}
	}
	return best, score >= 0
}

// StuckActionFor is the action StuckRuleFor gives: "noop" when no rule
// matches.
func (c Config) StuckActionFor(id uint64, signer common.Address) string {
	if r, ok := c.StuckRuleFor(id, signer); ok {
		return r.Action
	}
	return "noop"
}

// String names the webhook by scheme and host only: its path or query may
// carry a key, and the secret is never shown.
func (w StuckWebhook) String() string {
	if w.URL == "" {
		return "no webhook"
	}
	return "webhook " + redact.URL(w.URL)
}

// LogValue keeps the secret and the URL's path and query out of logs.
func (w StuckWebhook) LogValue() slog.Value { return slog.StringValue(w.String()) }
