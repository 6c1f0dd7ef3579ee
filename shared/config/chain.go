package config

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/txfence/txfence/shared/redact"
)

// FinalityMode chooses how a mined transaction becomes final.
type FinalityMode string

const (
	// FinalityConfirmations: final once the receipt block is Confirmations deep.
	FinalityConfirmations FinalityMode = "confirmations"
	// FinalityFinalized: final once the receipt block is at or below the
	// chain's `finalized` block.
	FinalityFinalized FinalityMode = "finalized"
)

// Chain is one configured EVM chain.
type Chain struct {
	ID      uint64
	RPCURLs []string
}

// Chain returns the configured chain with id, if any.
func (c Config) Chain(id uint64) (Chain, bool) {
	for _, ch := range c.Chains {
		if ch.ID == id {
			return ch, true
		}
	}
	return Chain{}, false
}

// String names the chain's RPC URLs by scheme and host only: their user
// info, path or query may carry a provider's key.
func (c Chain) String() string {
	names := make([]string, len(c.RPCURLs))
	for i, u := range c.RPCURLs {
		names[i] = redact.URL(u)
	}
	return fmt.Sprintf("chain %d [%s]", c.ID, strings.Join(names, " "))
}

// LogValue keeps the RPC URLs' keys out of logs.
func (c Chain) LogValue() slog.Value { return slog.StringValue(c.String()) }
