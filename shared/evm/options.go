package evm

import (
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/redact"
)

// Options tune the client. Start from DefaultOptions and change what you
// need; New and Dial reject options that make no sense.
type Options struct {
	// CallTimeout bounds every single RPC call (each attempt against each
	// endpoint gets its own timeout).
	CallTimeout time.Duration
	// GasMarginPercent is added to every gas estimate: 20 means the estimate
	// is multiplied by 1.2. Zero adds nothing.
	GasMarginPercent uint64
	// BaseFeeMultiplier sets the EIP-1559 fee cap to
	// BaseFeeMultiplier × base fee + tip. Must be at least 1.
	BaseFeeMultiplier uint64
	// MaxFeeCap caps the EIP-1559 max fee per gas and the legacy gas price.
	// Nil: no cap. A cap below the base fee means attempts wait until the base
	// fee drops under it.
	MaxFeeCap *big.Int
	// MaxPriorityFeeCap caps the EIP-1559 tip. Nil: no cap.
	MaxPriorityFeeCap *big.Int
	// MinPriorityFee is the lowest EIP-1559 tip suggested, whatever the node
	// says (0, or a fee history of empty blocks). Nil: no floor. At most
	// MaxPriorityFeeCap and MaxFeeCap. Not applied to legacy gas prices.
	MinPriorityFee *big.Int
	// MaxBatch is the most calls sent in one JSON-RPC batch; longer lists
	// go out as several batches. Nodes and providers refuse batches past a
	// limit of their own (geth: 1,000; many hosted providers: 100 or fewer).
	MaxBatch int
	// SimulateRecheck is how long Simulate uses eth_call and
	// eth_estimateGas on a chain whose node said it does not serve
	// eth_simulateV1 before it tries eth_simulateV1 again (the node may be
	// upgraded, or another endpoint may serve it). Zero tries it every
	// time.
	SimulateRecheck time.Duration
	// CodeCacheTTL is how long HasCode reuses its answer for an address.
	// An account may gain or lose code meanwhile (a deployment at a known
	// address, an EIP-7702 delegation), so keep it short. Zero: no reuse.
	CodeCacheTTL time.Duration
	// TipFromFeeHistory takes the tip from the fee history alone, never
	// from eth_maxPriorityFeePerGas.
	TipFromFeeHistory bool
	// FeeHistoryPercentile and FeeHistoryBlocks are the fee history's
	// question: the median over the last FeeHistoryBlocks blocks of this
	// percentile of each block's tips.
	FeeHistoryPercentile float64
	FeeHistoryBlocks     int
	// Legacy forces legacy (gasPrice) fees. Legacy mode is also used when the
	// latest header has no base fee.
	Legacy bool

	// DataFee is how the chain prices the data fee it charges beside the
	// execution gas (DataFees): DataFeeNone (an L1), DataFeeOPStack or
	// DataFeeArbitrum.
	DataFee DataFeeKind

	// What the resubmit sweep asks before it pays more for a transaction
	// (Inclusion), and how a chain without a public pool is sent to.

	// NoPublicMempool says the chain has no public pool that block
	// producers pick from by price: a sequencer (Arbitrum's) orders what
	// reaches it. Its transactions are sent again rather than bumped when
	// they go unmined, and a broadcast answered "nonce too high" (the
	// sequencer has not seen the nonce before it yet) is sent again at
	// once, up to NonceTooHighRetries times. The zero value is a chain
	// with a public pool.
	NoPublicMempool bool
	// NonceTooHighRetries is how many times, with NoPublicMempool, a
	// broadcast answered "nonce too high" is sent again at once before
	// the answer is returned.
	NonceTooHighRetries int
	// InclusionBlocks is how many recent blocks the inclusion price is
	// read from (eth_feeHistory).
	InclusionBlocks int
	// InclusionPercentile is the percentile (0-100) of each block's
	// priority fees, weighted by gas, taken as the tip that block
	// included; the inclusion price's tip is the median of them over the
	// blocks. A low one asks "did transactions paying this much get in?",
	// not "what did most pay?".
	InclusionPercentile float64

	// Endpoint health: each read endpoint's head is followed and reads go
	// to the healthiest (see health.go).

	// LagBlocks is how far behind the best known head an endpoint may be
	// and still be read from: one further behind is lagging, and is not
	// asked for nonces, receipts, blocks, fees or gas until it catches up.
	LagBlocks uint64
	// HeadInterval is how often, at most, each endpoint's head is read
	// (one eth_blockNumber), by the first call that finds the last reading
	// older: no goroutine follows heads between calls.
	HeadInterval time.Duration
	// DeadBackoffMin and DeadBackoffMax bound how long an endpoint that
	// failed at the transport level is passed over before it is tried
	// again: DeadBackoffMin after its first failure, doubling with each
	// failure in a row, at most DeadBackoffMax.
	DeadBackoffMin time.Duration
	DeadBackoffMax time.Duration
	// SendOnly are endpoints that only ever receive broadcasts, never a
	// read (see SendOnlyEndpoint).
	SendOnly []SendOnlyEndpoint
	// Routes names, per signer, the send-only endpoint its broadcasts go
	// through (RoutePublic: the read endpoints only, without the default
	// send-only ones). A signer not named takes the default route.
	Routes map[common.Address]string
	// Log receives the endpoints' changes of health (nil: none).
	Log *slog.Logger
}

// SendOnlyEndpoint is an endpoint that only receives broadcasts: a
// broadcast node, or a private (MEV-protected) submission URL.
type SendOnlyEndpoint struct {
	// Name names it in routes, logs, metrics and answers, never its URL.
	Name string
	// URL is where it listens (it may carry a key: never shown).
	URL string
	// PublicFallback sends what goes to it to the healthy read endpoints
	// too. Without it the endpoint is private: a broadcast through it goes
	// to it only, and only signers whose route names it use it. With it,
	// every broadcast of the default route goes to it as well.
	PublicFallback bool
}

// RoutePublic is the route of a signer whose broadcasts go to the
// chain's read endpoints only.
const RoutePublic = "public"

// DefaultOptions are a 5s call timeout, a 20% gas margin, a fee cap of twice
// the base fee plus the tip, no fee caps, eth_simulateV1 tried again every
// 10 minutes on a chain whose node did not serve it, code checks reused
// for a minute, a public pool, and an inclusion price from the 10th
// percentile of the last 10 blocks' tips. An endpoint more than 5 blocks
// behind the best is lagging (a minute of an L1 chain; chain profiles set
// their own), heads are read every 2 seconds at most, and a dead endpoint
// is tried again after 1 second, doubling up to 30.
func DefaultOptions() Options {
	return Options{
		CallTimeout:       5 * time.Second,
		GasMarginPercent:  20,
		BaseFeeMultiplier: 2,
		MaxBatch:          DefaultMaxBatch,
		SimulateRecheck:   10 * time.Minute,
		CodeCacheTTL:      time.Minute,

		FeeHistoryPercentile: 50,
		FeeHistoryBlocks:     10,

		NonceTooHighRetries: 3,
		InclusionBlocks:     10,
		InclusionPercentile: 10,

		LagBlocks:      DefaultLagBlocks,
		HeadInterval:   2 * time.Second,
		DeadBackoffMin: time.Second,
		DeadBackoffMax: 30 * time.Second,
	}
}

// DefaultLagBlocks is how many blocks behind the best head an endpoint
// may be and still be read from, unless a chain's profile says otherwise.
const DefaultLagBlocks = 5

// DefaultMaxBatch is what most hosted providers accept in one batch.
const DefaultMaxBatch = 100

func (o Options) validate() error {
	if o.CallTimeout <= 0 {
		return errors.New("call timeout must be positive")
	}
	if o.MaxBatch < 1 {
		return errors.New("max batch must be at least 1")
	}
	if o.SimulateRecheck < 0 {
		return errors.New("simulate recheck must not be negative")
	}
	if o.CodeCacheTTL < 0 {
		return errors.New("code cache TTL must not be negative")
	}
	if o.FeeHistoryPercentile < 0 || o.FeeHistoryPercentile > 100 {
		return errors.New("fee history percentile must be between 0 and 100")
	}
	if o.FeeHistoryBlocks < 1 || o.FeeHistoryBlocks > 1024 {
		return errors.New("fee history blocks must be between 1 and 1024")
	}
	if !o.DataFee.valid() {
		return fmt.Errorf("data fee kind %q is none of %q, %q, %q", o.DataFee, DataFeeNone, DataFeeOPStack, DataFeeArbitrum)
	}
	if o.BaseFeeMultiplier < 1 {
		return errors.New("base fee multiplier must be at least 1")
	}
	if o.NonceTooHighRetries < 0 {
		return errors.New("nonce too high retries must not be negative")
	}
	// eth_feeHistory serves at most 1,024 blocks (geth's maxBlockCount).
	if o.InclusionBlocks < 1 || o.InclusionBlocks > 1024 {
		return errors.New("inclusion blocks must be between 1 and 1024")
	}
	if o.InclusionPercentile < 0 || o.InclusionPercentile > 100 {
		return errors.New("inclusion percentile must be between 0 and 100")
	}
	for _, f := range []struct {
		name string
		v    *big.Int
	}{
		{"max fee cap", o.MaxFeeCap},
		{"max priority fee cap", o.MaxPriorityFeeCap},
		{"min priority fee", o.MinPriorityFee},
	} {
		if f.v != nil && f.v.Sign() < 0 {
			return errors.New(f.name + " must not be negative")
		}
	}
	if o.MinPriorityFee != nil && o.MaxPriorityFeeCap != nil && o.MinPriorityFee.Cmp(o.MaxPriorityFeeCap) > 0 {
		return errors.New("min priority fee is above the max priority fee cap")
	}
	// The tip never exceeds the max fee: a floor above the fee cap could not
	// be paid, and SuggestFees would have to break one of the two.
	if o.MinPriorityFee != nil && o.MaxFeeCap != nil && o.MinPriorityFee.Cmp(o.MaxFeeCap) > 0 {
		return errors.New("min priority fee is above the max fee cap")
	}
	return o.validateEndpoints()
}

// validateEndpoints checks the endpoint-health options and the send-only
// endpoints and routes. Its errors name an endpoint, never its URL.
func (o Options) validateEndpoints() error {
	if o.HeadInterval <= 0 {
		return errors.New("head interval must be positive")
	}
	if o.DeadBackoffMin <= 0 || o.DeadBackoffMax < o.DeadBackoffMin {
		return errors.New("dead backoff must be positive, its max at least its min")
	}
	names := map[string]bool{}
	for i, s := range o.SendOnly {
		switch {
		case !validRouteName(s.Name):
			return fmt.Errorf("send-only endpoint %d: name %q must be 1 to 32 letters, digits, '-' or '_', and not %q", i, s.Name, RoutePublic)
		case names[s.Name]:
			return fmt.Errorf("send-only endpoint %s is named twice", s.Name)
		case redact.URL(s.URL) == redact.Unparsable:
			return fmt.Errorf("send-only endpoint %s: its URL does not parse as a URL with a host", s.Name)
		}
		names[s.Name] = true
	}
	for signer, route := range o.Routes {
		if route != RoutePublic && !names[route] {
			return fmt.Errorf("signer %s: route %q names no send-only endpoint", signer.Hex(), route)
		}
	}
	return nil
}

// validRouteName reports whether name may name a send-only endpoint: a
// short word, so that it reads well in a metric label and a log line.
func validRouteName(name string) bool {
	if name == "" || len(name) > 32 || name == RoutePublic {
		return false
	}
	return strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") == ""
}
