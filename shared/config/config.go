// Package config loads txfence's settings from the environment once, into a
// typed Config, applying the defaults of DESIGN.md section 8 and validating
// every value. Nothing else in txfence reads the environment.
package config

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
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

// Database says how to reach PostgreSQL.
type Database struct {
	// URL is a libpq/pgx connection string. With an instance connection name
	// it carries user, database and options; the host is ignored.
	URL string
	// Instance is a Cloud SQL instance connection name (project:region:name);
	// when set, connections go through the Cloud SQL dialer.
	Instance string
	// IAMAuth enables Cloud SQL automatic IAM database authentication.
	IAMAuth bool
	// PrivateIP dials the instance's private IP.
	PrivateIP bool
	// MaxConns bounds the pool.
	MaxConns int32
	// StatementTimeout, LockTimeout and IdleInTxTimeout are set on every
	// connection: nothing waits on the database longer than they allow.
	StatementTimeout time.Duration
	LockTimeout      time.Duration
	IdleInTxTimeout  time.Duration
}

// Auth says how callers are authenticated and what they may do.
type Auth struct {
	// Methods are the accepted credentials: "oidc" (Google-signed ID
	// tokens for Audience), "apikey" (keys created with the admin command),
	// "dev" (development: a call without a credential is the all-powerful
	// principal "dev"). Required: production refuses to start without one,
	// and "dev" is refused on Cloud Run.
	Methods  []string
	Audience string // the OIDC audience: the API's URL as its callers name it
	// PolicySeed is written as version 1 of each principal's policy that has
	// none (the first deploy's policies).
	PolicySeed []txm.Policy
	// Rate limits per instance: each principal's calls per second and burst
	// (unless its policy says otherwise), each signer's creates per second.
	RatePerSecond       float64
	RateBurst           int
	SignerRatePerSecond float64
	// MaxWaits caps a principal's concurrent completion long-polls per
	// instance (unless its policy says otherwise).
	MaxWaits int
}

// Has reports whether method is accepted.
func (a Auth) Has(method string) bool {
	for _, m := range a.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// Lease holds the per-signer lease timings.
type Lease struct {
	Duration   time.Duration // how long an acquired or renewed lease lasts
	RenewEvery time.Duration // how often a working holder renews
	ClockSkew  time.Duration // how long past expiry before another owner may take over
}

// Chain is one configured EVM chain.
type Chain struct {
	ID      uint64
	RPCURLs []string
}

// ChainFees is the fee policy of one chain: caps on what automatic attempts
// (first signings and replacements) may pay, the tip floor, and how many
// replacements a transaction may get.
type ChainFees struct {
	MaxFee   *big.Int // max fee per gas (EIP-1559) or gas price (legacy), in wei
	MaxTip   *big.Int // max priority fee per gas, in wei
	MinTip   *big.Int // no suggested tip is below this, in wei
	MaxBumps int      // replacements per transaction before fee_cap_reached
	// TxFeeCap is the most a whole transaction's fee (gas limit × max fee
	// per gas) may be, as the chain's nodes refuse above it (geth's
	// --rpc.txfeecap, 1 ether by default); nil: no cap.
	TxFeeCap *big.Int
}

// FeeOverride is TXFENCE_CHAIN_FEES's entry for one chain; nil fields (and
// a negative MaxBumps) keep the global setting.
type FeeOverride struct {
	MaxFee, MaxTip, MinTip, TxFeeCap *big.Int
	MaxBumps                         int
}

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

// TelemetryMode chooses where metrics and traces go.
type TelemetryMode string

const (
	// TelemetryPrometheus keeps metrics in the process, rendered as
	// Prometheus text at the API's /metrics; no spans are recorded (log
	// lines carry the trace a caller sent, if any). The default.
	TelemetryPrometheus TelemetryMode = "prometheus"
	// TelemetryGCP also exports metrics to Cloud Monitoring (as
	// workload.googleapis.com/NAME) and sampled spans to Cloud Trace.
	TelemetryGCP TelemetryMode = "gcp"
	// TelemetryNone records nothing: no metrics, no spans.
	TelemetryNone TelemetryMode = "none"
)

// Telemetry says where metrics and traces go.
type Telemetry struct {
	Mode TelemetryMode
	// Project is the Google Cloud project metrics and traces are written
	// to, and that log lines name their traces in; empty means Config.Project
	// (see Config.TelemetryProject).
	Project string
	// SampleRatio is the share of new traces recorded (gcp): a request that
	// arrives with a trace follows its caller's sampling decision, so on
	// Cloud Run the API follows Cloud Run's.
	SampleRatio float64
	// Interval is how often metrics are exported (gcp).
	Interval time.Duration
	// Service names this process's service in the exported resource: the
	// Cloud Run service (K_SERVICE), else "txfence".
	Service string
}

// Signer is one configured signing address and where its key lives. KeyRef
// is "local:env:VAR", "local:file:/path" or "kms:projects/.../cryptoKeyVersions/N";
// it may be empty for processes that never sign (the API).
type Signer struct {
	Address common.Address
	KeyRef  string
}

// Config is every setting txfence uses.
type Config struct {
	InstanceID string // identifies this process in lease owners and logs
	LogLevel   string
	Telemetry  Telemetry

	Database Database
	// Shards, when set (TXFENCE_DATABASES), are the databases the signers
	// are spread over by ShardMap; Database then only carries the settings
	// every shard shares (pool size, timeouts, Cloud SQL options).
	Shards   []Shard
	ShardMap ShardMap
	Lease    Lease
	Auth     Auth

	Chains []Chain
	// NoChains is TXFENCE_CHAINS=none: this process dials no chain. The
	// OutboxSweep's, which only relays the outbox, is given it so that it
	// holds no RPC URL (their provider keys) it does not need.
	NoChains bool
	Signers  []Signer
	// signerAt indexes Signers by address (Load builds it); Signer checks
	// what it finds and scans on a miss, so a Config built or changed in
	// code without it still answers right, only slower.
	signerAt map[common.Address]int

	NonceStateTimeout time.Duration // how long the chain's pending nonce is trusted
	BatchSize         int           // creates per allocation transaction
	BatchWait         time.Duration // how long a short batch waits for more requests before it runs (0: not at all)
	ContendedWait     time.Duration // how long a short batch of contended signers waits for more requests before it runs
	// Workers is how many allocation batches an instance has in flight (a
	// signer in at most one). Default 2: one lane for the signers that are
	// not contended, one call at a time, which gathers the most requests
	// per call, and one for contended signers, so that a call waiting for a
	// contended signer's lease row holds up no other signer (see the
	// dispatcher in shared/app). With 1, every batch takes any signer.
	Workers int

	MaxGasLimit  uint64   // largest gas limit a create may ask for
	MaxDataBytes int      // largest calldata a create may carry
	MaxFeeCap    *big.Int // largest maxFeePerGas / gasPrice a create may ask for, in wei

	MaxTipCap      *big.Int // largest priority fee an automatic attempt pays (nil: MaxFeeCap)
	MinPriorityFee *big.Int // no suggested tip is below this floor, in wei
	MaxBumps       int      // fee replacements per transaction
	TxFeeCap       *big.Int // the nodes' cap on gas limit × max fee per gas, in wei (0: none)
	BumpAfter      time.Duration
	BumpPercent    int // each replacement pays at least this much more (>= 10)
	// ChainFees overrides the fee settings above per chain.
	ChainFees map[uint64]FeeOverride

	MaxInFlight         int           // broadcast-but-unmined transactions per signer, STUCK included
	RPCMaxBatch         int           // most calls in one JSON-RPC batch to a node
	SubmitBudget        time.Duration // how long one Submit invocation drains
	ResubmitInterval    time.Duration // rebroadcast an attempt unseen for this long
	RecheckAfter        time.Duration // ask the node for the next nonce's attempt unmined this long (sweep_resubmit.go)
	ResubmitBudget      time.Duration // how long one ResubmitSweep invocation keeps sweeping
	ResubmitPass        time.Duration // pause between its passes
	MaxRebroadcasts     int           // rebroadcasts of the next nonce to be mined before STUCK
	StuckAfter          time.Duration // pending (or failing to leave ALLOCATED) longer than this is STUCK
	RetryBackoffMin     time.Duration // first wait after a failed round of work on a transaction
	RetryBackoffMax     time.Duration // longest wait between rounds (doubling from the first)
	StuckPolicy         []StuckRule   // stuck-resolution rules; default noop
	StuckWebhook        StuckWebhook
	ReceiptWorkers      int           // signers a finality pass sweeps at once
	StaleReceiptTimeout time.Duration // the finality sweep checks TRACKING untouched this long
	// ReceiptWait is how long one Receipt invocation follows the chain's
	// head for receipts still missing (checking again each time it moves)
	// before it asks Pub/Sub for a retry; 0: it asks at once. Keep it well
	// under the Receipt function's timeout (60 s in terraform).
	ReceiptWait time.Duration

	FinalityMode     FinalityMode
	Confirmations    uint64
	FinalityBudget   time.Duration // how long one FinalitySweep invocation keeps sweeping: a little past the scheduler period, so that invocations overlap rather than leave a gap
	FinalityInterval time.Duration // longest pause between sweep passes (a pass starts sooner when a chain's head moves)
	// ReorgWatch is how long after reporting an outcome the finality sweep
	// keeps checking its block (confirmations mode): a reorg deeper than the
	// confirmation depth reopens the transaction and its next outcome
	// carries newFork. Zero turns the watch off.
	ReorgWatch time.Duration

	// onCloudRun is set by Load when K_SERVICE is: development
	// authentication is refused there.
	onCloudRun bool
	// databasesSet is set by Load when TXFENCE_DATABASES is given, even if
	// it failed to parse, so that its problem is not reported as a missing
	// TXFENCE_DATABASE_URL.
	databasesSet bool

	Project         string // Google Cloud project for Pub/Sub
	TopicSubmit     string
	TopicReceipt    string
	TopicCompletion string
}

// Defaults returns the configuration used when no variable is set: every
// setting's default (settings.go).
func Defaults() Config {
	c, errs := loadSettings(func(string) (string, bool) { return "", false })
	if len(errs) > 0 {
		panic(fmt.Sprintf("config: a default does not parse: %v", errs)) // a bug in settings.go, caught by any test
	}
	return c
}

// ChainsNone is the TXFENCE_CHAINS of a process that dials no chain.
const ChainsNone = "none"

// Environment variable names. Every setting has exactly one.
const (
	EnvInstanceID          = "TXFENCE_INSTANCE_ID"
	EnvLogLevel            = "TXFENCE_LOG_LEVEL"
	EnvTelemetry           = "TXFENCE_TELEMETRY"
	EnvTelemetryProject    = "TXFENCE_TELEMETRY_PROJECT"
	EnvTraceSampleRatio    = "TXFENCE_TRACE_SAMPLE_RATIO"
	EnvMetricsInterval     = "TXFENCE_METRICS_INTERVAL"
	EnvDatabaseURL         = "TXFENCE_DATABASE_URL"
	EnvCloudSQLInstance    = "TXFENCE_CLOUDSQL_INSTANCE"
	EnvCloudSQLIAMAuth     = "TXFENCE_CLOUDSQL_IAM_AUTH"
	EnvCloudSQLPrivateIP   = "TXFENCE_CLOUDSQL_PRIVATE_IP"
	EnvDBMaxConns          = "TXFENCE_DB_MAX_CONNS"
	EnvDBStatementTimeout  = "TXFENCE_DB_STATEMENT_TIMEOUT"
	EnvDBLockTimeout       = "TXFENCE_DB_LOCK_TIMEOUT"
	EnvDBIdleInTxTimeout   = "TXFENCE_DB_IDLE_IN_TX_TIMEOUT"
	EnvAuth                = "TXFENCE_AUTH"
	EnvOIDCAudience        = "TXFENCE_OIDC_AUDIENCE"
	EnvPolicySeed          = "TXFENCE_POLICY_SEED"
	EnvRatePerSecond       = "TXFENCE_RATE_PER_SECOND"
	EnvRateBurst           = "TXFENCE_RATE_BURST"
	EnvSignerRatePerSecond = "TXFENCE_SIGNER_RATE_PER_SECOND"
	EnvMaxWaits            = "TXFENCE_MAX_WAITS"
	EnvLeaseDuration       = "TXFENCE_LEASE_DURATION"
	EnvLeaseRenew          = "TXFENCE_LEASE_RENEW"
	EnvClockSkew           = "TXFENCE_CLOCK_SKEW"
	EnvChains              = "TXFENCE_CHAINS"
	EnvSigners             = "TXFENCE_SIGNERS"
	EnvNonceStateTimeout   = "TXFENCE_NONCE_STATE_TIMEOUT"
	EnvBatchSize           = "TXFENCE_BATCH_SIZE"
	EnvBatchWait           = "TXFENCE_BATCH_WAIT"
	EnvContendedWait       = "TXFENCE_CONTENDED_WAIT"
	EnvWorkers             = "TXFENCE_WORKERS"
	EnvMaxGasLimit         = "TXFENCE_MAX_GAS_LIMIT"
	EnvMaxDataBytes        = "TXFENCE_MAX_DATA_BYTES"
	EnvMaxFeeCap           = "TXFENCE_MAX_FEE_CAP_WEI"
	EnvMaxTipCap           = "TXFENCE_MAX_TIP_CAP_WEI"
	EnvMinPriorityFee      = "TXFENCE_MIN_PRIORITY_FEE_WEI"
	EnvMaxBumps            = "TXFENCE_MAX_BUMPS"
	EnvTxFeeCap            = "TXFENCE_TX_FEE_CAP_WEI"
	EnvBumpAfter           = "TXFENCE_BUMP_AFTER"
	EnvBumpPercent         = "TXFENCE_BUMP_PERCENT"
	EnvChainFees           = "TXFENCE_CHAIN_FEES"
	EnvResubmitBudget      = "TXFENCE_RESUBMIT_BUDGET"
	EnvResubmitPass        = "TXFENCE_RESUBMIT_PASS_INTERVAL"
	EnvRetryBackoffMin     = "TXFENCE_RETRY_BACKOFF_MIN"
	EnvRetryBackoffMax     = "TXFENCE_RETRY_BACKOFF_MAX"
	EnvStuckPolicy         = "TXFENCE_STUCK_POLICY"
	EnvStuckWebhookURL     = "TXFENCE_STUCK_WEBHOOK_URL"
	EnvStuckWebhookSecret  = "TXFENCE_STUCK_WEBHOOK_SECRET"
	EnvStuckWebhookTimeout = "TXFENCE_STUCK_WEBHOOK_TIMEOUT"
	EnvMaxInFlight         = "TXFENCE_MAX_IN_FLIGHT"
	EnvRPCMaxBatch         = "TXFENCE_RPC_MAX_BATCH"
	EnvSubmitBudget        = "TXFENCE_SUBMIT_BUDGET"
	EnvResubmitInterval    = "TXFENCE_RESUBMIT_INTERVAL"
	EnvRecheckAfter        = "TXFENCE_RECHECK_AFTER"
	EnvMaxRebroadcasts     = "TXFENCE_MAX_REBROADCASTS"
	EnvStuckAfter          = "TXFENCE_STUCK_AFTER"
	EnvReceiptWorkers      = "TXFENCE_RECEIPT_WORKERS"
	EnvReceiptWait         = "TXFENCE_RECEIPT_WAIT"
	EnvStaleReceiptTimeout = "TXFENCE_STALE_RECEIPT_TIMEOUT"
	EnvFinalityMode        = "TXFENCE_FINALITY_MODE"
	EnvConfirmations       = "TXFENCE_CONFIRMATIONS"
	EnvFinalityBudget      = "TXFENCE_FINALITY_BUDGET"
	EnvFinalityInterval    = "TXFENCE_FINALITY_INTERVAL"
	EnvReorgWatch          = "TXFENCE_REORG_WATCH"
	EnvProject             = "TXFENCE_PROJECT"
	EnvTopicSubmit         = "TXFENCE_TOPIC_SUBMIT"
	EnvTopicReceipt        = "TXFENCE_TOPIC_RECEIPT"
	EnvTopicCompletion     = "TXFENCE_TOPIC_COMPLETION"
)

// FromEnv loads the configuration from the process environment.
func FromEnv() (Config, error) { return Load(os.LookupEnv) }

// Load builds a Config from lookup (os.LookupEnv in production), starting
// from Defaults. The error names every variable that is malformed or
// missing, one per line, so one run shows everything to fix.
func Load(lookup func(string) (string, bool)) (Config, error) {
	c, errs := loadSettings(lookup)
	p := parser{lookup: lookup, errs: errs}

	if c.InstanceID == "" {
		c.InstanceID = defaultInstanceID(lookup)
	}
	_, c.databasesSet = p.get(EnvDatabases)
	if v, ok := lookup("K_SERVICE"); ok && v != "" {
		c.onCloudRun = true
		c.Telemetry.Service = v
	}
	// A variable that failed to parse kept its default, which validate may
	// also dislike; report each variable once, with the parse problem.
	reported := map[string]bool{}
	for _, pr := range p.errs {
		reported[pr.Var] = true
	}
	for _, pr := range c.validate() {
		if !reported[pr.Var] {
			p.errs = append(p.errs, pr)
		}
	}
	if len(p.errs) > 0 {
		return Config{}, &Error{Problems: p.errs}
	}
	return c.indexed(), nil
}

// indexed returns c with its signers indexed by address: every create and
// signer read looks its signer up, and a scan of 1,000 signers took 5.5 µs
// (BenchmarkSigner).
func (c Config) indexed() Config {
	c.signerAt = make(map[common.Address]int, len(c.Signers))
	for i, s := range c.Signers {
		c.signerAt[s.Address] = i
	}
	return c
}

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
		f := c.FeesFor(id)
		if f.MaxFee.Cmp(c.MaxFeeCap) > 0 {
			bad(EnvChainFees, "chain %d: maxFee %s is above %s (%s)", id, f.MaxFee, EnvMaxFeeCap, c.MaxFeeCap)
		}
		if f.MinTip.Cmp(f.MaxTip) > 0 || f.MinTip.Cmp(f.MaxFee) > 0 {
			bad(EnvChainFees, "chain %d: the tip floor %s wei is above the tip cap %s or the fee cap %s", id, f.MinTip, f.MaxTip, f.MaxFee)
		}
	}
	if c.MaxInFlight < 1 {
		bad(EnvMaxInFlight, "must be at least 1, got %d", c.MaxInFlight)
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

func (c Config) validateTelemetry(bad func(env, format string, args ...any)) {
	t := c.Telemetry
	switch t.Mode {
	case TelemetryPrometheus, TelemetryNone:
	case TelemetryGCP:
		if c.TelemetryProject() == "" {
			bad(EnvTelemetryProject, "is required with %s=gcp (or set %s): the project metrics and traces are written to", EnvTelemetry, EnvProject)
		}
	default:
		bad(EnvTelemetry, "must be gcp, prometheus or none; got %q", t.Mode)
	}
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		bad(EnvTraceSampleRatio, "must be between 0 and 1, got %g", t.SampleRatio)
	}
	// Cloud Monitoring refuses points of one series closer than 5s apart.
	if t.Interval < 10*time.Second || t.Interval > time.Hour {
		bad(EnvMetricsInterval, "must be between 10s and 1h, got %s", t.Interval)
	}
}

// TelemetryProject is the project metrics and traces are written to:
// Telemetry.Project, else Project.
func (c Config) TelemetryProject() string {
	if c.Telemetry.Project != "" {
		return c.Telemetry.Project
	}
	return c.Project
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

// AuthMethods are the accepted values of TXFENCE_AUTH.
var AuthMethods = []string{"oidc", "apikey", "dev"}

func (c Config) validateAuth(bad func(env, format string, args ...any)) {
	a := c.Auth
	if len(a.Methods) == 0 {
		bad(EnvAuth, "is required: oidc, apikey and/or dev (development only), comma separated; txfence never serves unauthenticated calls by default")
	}
	for _, m := range a.Methods {
		ok := false
		for _, known := range AuthMethods {
			ok = ok || m == known
		}
		if !ok {
			bad(EnvAuth, "%q is not one of oidc, apikey, dev", m)
		}
	}
	if a.Has("oidc") && a.Audience == "" {
		bad(EnvOIDCAudience, "is required with %s=oidc: the audience callers' ID tokens are minted for (the API's URL)", EnvAuth)
	}
	if a.Has("dev") && c.onCloudRun {
		bad(EnvAuth, "dev (no authentication) is refused on Cloud Run (K_SERVICE is set)")
	}
	if a.RatePerSecond <= 0 || a.SignerRatePerSecond <= 0 {
		bad(EnvRatePerSecond, "the rates must be positive")
	}
	if a.RateBurst < 1 {
		bad(EnvRateBurst, "must be at least 1, got %d", a.RateBurst)
	}
	if a.MaxWaits < 1 {
		bad(EnvMaxWaits, "must be at least 1, got %d", a.MaxWaits)
	}
}

// FeesFor is the fee policy of chain id: the global settings with the
// chain's TXFENCE_CHAIN_FEES entry over them.
func (c Config) FeesFor(id uint64) ChainFees {
	f := ChainFees{MaxFee: c.MaxFeeCap, MaxTip: c.MaxTipCap, MinTip: c.MinPriorityFee, MaxBumps: c.MaxBumps, TxFeeCap: c.TxFeeCap}
	if o, ok := c.ChainFees[id]; ok {
		if o.TxFeeCap != nil {
			f.TxFeeCap = o.TxFeeCap
		}
		if o.MaxFee != nil {
			f.MaxFee = o.MaxFee
		}
		if o.MaxTip != nil {
			f.MaxTip = o.MaxTip
		}
		if o.MinTip != nil {
			f.MinTip = o.MinTip
		}
		if o.MaxBumps >= 0 {
			f.MaxBumps = o.MaxBumps
		}
	}
	if f.MaxTip == nil {
		f.MaxTip = f.MaxFee
	}
	if f.TxFeeCap != nil && f.TxFeeCap.Sign() == 0 {
		f.TxFeeCap = nil
	}
	return f
}

// FeeCaps is chain id's bound on automatic replacements.
func (c Config) FeeCaps(id uint64) txm.FeeCaps {
	f := c.FeesFor(id)
	return txm.FeeCaps{MaxFee: f.MaxFee, MaxTip: f.MaxTip, MaxBumps: f.MaxBumps, TxFeeCap: f.TxFeeCap}
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

// Signer returns the configured signer for addr, if any.
func (c Config) Signer(addr common.Address) (Signer, bool) {
	if i, ok := c.signerAt[addr]; ok && i < len(c.Signers) && c.Signers[i].Address == addr {
		return c.Signers[i], true
	}
	for _, s := range c.Signers {
		if s.Address == addr {
			return s, true
		}
	}
	return Signer{}, false
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

// ErrConfig matches every *Error under errors.Is.
var ErrConfig = errors.New("invalid configuration")

// Is makes *Error match ErrConfig.
func (e *Error) Is(target error) bool { return target == ErrConfig }
