package config

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

// parser reads typed values, collecting a Problem for each malformed one.
type parser struct {
	lookup func(string) (string, bool)
	errs   []Problem
}

func (p *parser) get(env string) (string, bool) {
	v, ok := p.lookup(env)
	v = strings.TrimSpace(v)
	return v, ok && v != ""
}

func (p *parser) bad(env, format string, args ...any) {
	p.errs = append(p.errs, Problem{Var: env, Message: fmt.Sprintf(format, args...)})
}

func (p *parser) str(env string, dst *string) bool {
	v, ok := p.get(env)
	if ok {
		*dst = v
	}
	return ok
}

func (p *parser) boolean(env string, dst *bool) {
	if v, ok := p.get(env); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			p.bad(env, "must be true or false, got %q", v)
			return
		}
		*dst = b
	}
}

func (p *parser) integer(env string, dst *int) {
	if v, ok := p.get(env); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			p.bad(env, "must be an integer, got %q", v)
			return
		}
		*dst = n
	}
}

func (p *parser) int32(env string, dst *int32) {
	if v, ok := p.get(env); ok {
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil {
			p.bad(env, "must be an integer, got %q", v)
			return
		}
		*dst = int32(n)
	}
}

func (p *parser) uint(env string, dst *uint64) {
	if v, ok := p.get(env); ok {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			p.bad(env, "must be a non-negative integer, got %q", v)
			return
		}
		*dst = n
	}
}

func (p *parser) bigInt(env string, dst **big.Int) {
	if v, ok := p.get(env); ok {
		n, ok := new(big.Int).SetString(v, 10)
		if !ok {
			p.bad(env, "must be a decimal integer, got %q", v)
			return
		}
		*dst = n
	}
}

func (p *parser) duration(env string, dst *time.Duration) {
	if v, ok := p.get(env); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			p.bad(env, "must be a duration such as 10s or 250ms, got %q", v)
			return
		}
		*dst = d
	}
}

// chains parses CHAIN_ID=URL[|URL...][,CHAIN_ID=...].
func (p *parser) chains(env string, dst *[]Chain, none *bool) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	if strings.TrimSpace(v) == ChainsNone {
		*none = true
		return
	}
	var out []Chain
	seen := map[uint64]bool{}
	for _, entry := range strings.Split(v, ",") {
		id, urls, found := strings.Cut(strings.TrimSpace(entry), "=")
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if !found || err != nil || n == 0 {
			// The entry's URLs may carry keys: they are named, not quoted.
			p.bad(env, "entry %q must be CHAIN_ID=RPC_URL[|RPC_URL...] with a positive chain id", redact.Text(entry))
			return
		}
		if seen[n] {
			p.bad(env, "chain %d is listed twice", n)
			return
		}
		seen[n] = true
		ch := Chain{ID: n}
		for _, u := range strings.Split(urls, "|") {
			u = strings.TrimSpace(u)
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
				p.bad(env, "chain %d: RPC URL %s must start with http://, https://, ws:// or wss://", n, redact.URL(u))
				return
			}
			if redact.URL(u) == redact.Unparsable {
				p.bad(env, "chain %d: RPC URL %d does not parse as a URL with a host", n, len(ch.RPCURLs)+1)
				return
			}
			ch.RPCURLs = append(ch.RPCURLs, u)
		}
		out = append(out, ch)
	}
	*dst = out
}

// signers parses ADDRESS[=KEY_REF][,...].
func (p *parser) signers(env string, dst *[]Signer) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var out []Signer
	seen := map[common.Address]bool{}
	for _, entry := range strings.Split(v, ",") {
		addr, ref, _ := strings.Cut(strings.TrimSpace(entry), "=")
		a, err := txm.ParseAddress(strings.TrimSpace(addr))
		if err != nil {
			p.bad(env, "entry %q: %v", entry, err)
			return
		}
		if seen[a] {
			p.bad(env, "signer %s is listed twice", txm.CanonicalAddress(a))
			return
		}
		seen[a] = true
		ref = strings.TrimSpace(ref)
		if ref != "" && !strings.HasPrefix(ref, "local:env:") && !strings.HasPrefix(ref, "local:file:") && !strings.HasPrefix(ref, "kms:") {
			p.bad(env, "signer %s: key reference %q must start with local:env:, local:file: or kms:", txm.CanonicalAddress(a), ref)
			return
		}
		out = append(out, Signer{Address: a, KeyRef: ref})
	}
	*dst = out
}

// list parses a comma-separated list of words.
func (p *parser) list(env string, dst *[]string) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var out []string
	for _, w := range strings.Split(v, ",") {
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	*dst = out
}

func (p *parser) float(env string, dst *float64) {
	if v, ok := p.get(env); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			p.bad(env, "must be a number, got %q", v)
			return
		}
		*dst = f
	}
}

// policies parses a JSON array of policies (txm.Policy's wire form).
func (p *parser) policies(env string, dst *[]txm.Policy) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var ps []txm.Policy
	if err := json.Unmarshal([]byte(v), &ps); err != nil {
		p.bad(env, "must be a JSON array of policies: %v", err)
		return
	}
	for _, pol := range ps {
		if err := pol.Validate(); err != nil {
			p.bad(env, "policy of %q: %v", pol.Principal, err)
			return
		}
	}
	*dst = ps
}

// chainFees parses CHAIN_ID:key=value[,key=value...][;CHAIN_ID:...] with
// keys maxFee, maxTip, minTip (wei) and maxBumps.
func (p *parser) chainFees(env string, dst *map[uint64]FeeOverride) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	out := map[uint64]FeeOverride{}
	for _, entry := range strings.Split(v, ";") {
		id, kvs, found := strings.Cut(strings.TrimSpace(entry), ":")
		n, err := strconv.ParseUint(strings.TrimSpace(id), 10, 64)
		if !found || err != nil || n == 0 {
			p.bad(env, "entry %q must be CHAIN_ID:key=value[,key=value...] with keys maxFee, maxTip, minTip, txFeeCap, maxBumps", entry)
			return
		}
		if _, dup := out[n]; dup {
			p.bad(env, "chain %d is listed twice", n)
			return
		}
		o := FeeOverride{MaxBumps: -1}
		for _, kv := range strings.Split(kvs, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
			val = strings.TrimSpace(val)
			if k == "maxBumps" {
				b, err := strconv.Atoi(val)
				if err != nil || b < 0 || b > 1000 {
					p.bad(env, "chain %d: maxBumps must be between 0 and 1000, got %q", n, val)
					return
				}
				o.MaxBumps = b
				continue
			}
			w, ok := new(big.Int).SetString(val, 10)
			if !ok || w.Sign() < 0 {
				p.bad(env, "chain %d: %s must be a decimal number of wei, got %q", n, k, val)
				return
			}
			switch k {
			case "maxFee":
				o.MaxFee = w
			case "maxTip":
				o.MaxTip = w
			case "minTip":
				o.MinTip = w
			case "txFeeCap":
				o.TxFeeCap = w
			default:
				p.bad(env, "chain %d: unknown key %q (maxFee, maxTip, minTip, txFeeCap, maxBumps)", n, k)
				return
			}
		}
		out[n] = o
	}
	*dst = out
}

// stuckPolicy parses RULE[,RULE...] where RULE is SCOPE=ACTION, SCOPE one
// of *, CHAIN_ID, ADDRESS or CHAIN_ID:ADDRESS, ACTION one of noop, bump,
// cancel, placeholder, webhook.
func (p *parser) stuckPolicy(env string, dst *[]StuckRule) {
	v, ok := p.get(env)
	if !ok {
		return
	}
	var out []StuckRule
	for _, entry := range strings.Split(v, ",") {
		scope, action, found := strings.Cut(strings.TrimSpace(entry), "=")
		scope, action = strings.TrimSpace(scope), strings.TrimSpace(action)
		if !found {
			p.bad(env, "rule %q must be SCOPE=ACTION", entry)
			return
		}
		if _, err := txm.ParseStuckAction(action); err != nil && action != StuckWebhookAction {
			p.bad(env, "rule %q: action must be noop, bump, cancel, placeholder or webhook", entry)
			return
		}
		r := StuckRule{Action: action}
		chain, addr, hasAddr := strings.Cut(scope, ":")
		switch {
		case scope == "*":
		case hasAddr || strings.HasPrefix(scope, "0x"):
			if !hasAddr {
				chain, addr = "", scope
			}
			a, err := txm.ParseAddress(addr)
			if err != nil {
				p.bad(env, "rule %q: %v", entry, err)
				return
			}
			r.Signer = &a
			fallthrough
		default:
			if chain != "" && chain != "*" {
				n, err := strconv.ParseUint(chain, 10, 64)
				if err != nil || n == 0 {
					p.bad(env, "rule %q: the scope must be *, CHAIN_ID, ADDRESS or CHAIN_ID:ADDRESS", entry)
					return
				}
				r.ChainID = n
			}
		}
		out = append(out, r)
	}
	*dst = out
}

// defaultInstanceID names this process: the Cloud Run revision (or the
// host name) and a random suffix. The suffix matters: every instance of a
// revision has the same revision name and, in a container, the same pid, and
// lease owners must differ between instances.
func defaultInstanceID(lookup func(string) (string, bool)) string {
	base, ok := lookup("K_REVISION")
	if !ok || base == "" {
		base, _ = os.Hostname()
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%x", base, b)
}
