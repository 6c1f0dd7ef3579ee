package config

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

// EnvSendOnly lists the chains' send-only endpoints (SendOnly).
const EnvSendOnly = "TXFENCE_SEND_ONLY"

// RoutePublic is reserved: a send-only endpoint may not be named so (a
// signer's route of that name takes the read endpoints only).
const RoutePublic = "public"

// SendOnly is one send-only endpoint of a chain: it receives broadcasts
// and is never read from. One with PublicFallback gets every broadcast
// that also goes to the chain's healthy endpoints (a broadcast node);
// one without is private (a MEV-protected submission URL): the broadcasts
// of the signers it names, and of the transactions whose create named it
// (sendVia), go to it only.
type SendOnly struct {
	ChainID uint64
	// Name names it in logs, metrics and answers, never its URL.
	Name string
	// URL may carry a provider's key: it is named by scheme and host only.
	URL            string
	PublicFallback bool
	// Signers are the signers whose broadcasts go through it (their
	// route); a private endpoint that names none takes only the
	// transactions whose create names it.
	Signers []common.Address
}

// String names the endpoint and its URL by scheme and host only.
func (s SendOnly) String() string {
	return fmt.Sprintf("chain %d send-only %s (%s)", s.ChainID, s.Name, redact.URL(s.URL))
}

// LogValue keeps the URL's key out of logs.
func (s SendOnly) LogValue() slog.Value { return slog.StringValue(s.String()) }

// SendOnlyFor returns chain id's send-only endpoints, in configuration
// order.
func (c Config) SendOnlyFor(id uint64) []SendOnly {
	var out []SendOnly
	for _, s := range c.SendOnly {
		if s.ChainID == id {
			out = append(out, s)
		}
	}
	return out
}

// sendOnly parses CHAIN_ID=NAME=URL[;fallback][;signers=ADDRESS|ADDRESS...][,...].
func (p *parser) sendOnly(env string, dst *[]SendOnly) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var out []SendOnly
	for _, entry := range strings.Split(v, ",") {
		head, opts, _ := strings.Cut(strings.TrimSpace(entry), ";")
		id, rest, found := strings.Cut(head, "=")
		name, u, found2 := strings.Cut(rest, "=")
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if !found || !found2 || err != nil || n == 0 {
			// The entry's URL may carry a key: it is named, not quoted.
			p.bad(env, "entry %q must be CHAIN_ID=NAME=URL[;fallback][;signers=ADDRESS|...] with a positive chain id", redact.Text(entry))
			return
		}
		s := SendOnly{ChainID: n, Name: strings.TrimSpace(name), URL: strings.TrimSpace(u)}
		if opts != "" {
			for _, o := range strings.Split(opts, ";") {
				key, val, _ := strings.Cut(strings.TrimSpace(o), "=")
				switch strings.TrimSpace(key) {
				case "fallback":
					s.PublicFallback = true
				case "signers":
					for _, a := range strings.Split(val, "|") {
						addr, err := txm.ParseAddress(strings.TrimSpace(a))
						if err != nil {
							p.bad(env, "chain %d send-only %s: signer %q: %v", n, s.Name, a, err)
							return
						}
						s.Signers = append(s.Signers, addr)
					}
				default:
					p.bad(env, "chain %d send-only %s: option %q must be fallback or signers=ADDRESS|...", n, s.Name, key)
					return
				}
			}
		}
		out = append(out, s)
	}
	*dst = out
}

// validateSendOnly checks the send-only endpoints against the chains and
// the signers. Its messages name an endpoint, never its URL.
func (c Config) validateSendOnly(bad func(env, format string, args ...any)) {
	type key struct {
		chain uint64
		name  string
	}
	names := map[key]bool{}
	routed := map[key]string{} // by chain and signer's address hex: the endpoint
	for _, s := range c.SendOnly {
		who := fmt.Sprintf("chain %d send-only %s", s.ChainID, s.Name)
		if _, ok := c.Chain(s.ChainID); !ok && !c.NoChains {
			bad(EnvSendOnly, "%s: chain %d is not in %s", who, s.ChainID, EnvChains)
		}
		if !validEndpointName(s.Name) {
			bad(EnvSendOnly, "%s: the name must be 1 to 32 letters, digits, '-' or '_', and not %q", who, RoutePublic)
		}
		if names[key{s.ChainID, s.Name}] {
			bad(EnvSendOnly, "%s is named twice", who)
		}
		names[key{s.ChainID, s.Name}] = true
		if !strings.HasPrefix(s.URL, "http://") && !strings.HasPrefix(s.URL, "https://") && !strings.HasPrefix(s.URL, "ws://") &&
			!strings.HasPrefix(s.URL, "wss://") {
			bad(EnvSendOnly, "%s: its URL %s must start with http://, https://, ws:// or wss://", who, redact.URL(s.URL))
		} else if redact.URL(s.URL) == redact.Unparsable {
			bad(EnvSendOnly, "%s: its URL does not parse as a URL with a host", who)
		}
		for _, a := range s.Signers {
			if _, ok := c.Signer(a); !ok {
				bad(EnvSendOnly, "%s: signer %s is not in %s", who, txm.CanonicalAddress(a), EnvSigners)
			}
			k := key{s.ChainID, a.Hex()}
			if other, dup := routed[k]; dup {
				bad(EnvSendOnly, "signer %s has two routes on chain %d: %s and %s", txm.CanonicalAddress(a), s.ChainID, other, s.Name)
			}
			routed[k] = s.Name
		}
	}
}

// SendVia lists the routes a create on chain id may name (sendVia):
// RoutePublic and the chain's send-only endpoints, in configuration order.
func (c Config) SendVia(id uint64) []string {
	out := []string{RoutePublic}
	for _, s := range c.SendOnlyFor(id) {
		out = append(out, s.Name)
	}
	return out
}

// validEndpointName reports whether name may name a send-only endpoint: a
// short word, so that it reads well in a metric label and a log line.
func validEndpointName(name string) bool {
	if name == "" || len(name) > 32 || name == RoutePublic {
		return false
	}
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == ""
}
