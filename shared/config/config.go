// Package config loads txfence's settings from the environment once, into a
// typed Config, applying the defaults of the settings table (settings.go) and validating
// every value. Nothing else in txfence reads the environment.
package config

import (
	"fmt"
	"math/big"
	"os"
	"time"

	"github.com/ethereum/go-ethereum/common"
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

// Lease holds the per-signer lease timings.
type Lease struct {
	Duration   time.Duration // how long an acquired or renewed lease lasts
	RenewEvery time.Duration // how often a working holder renews
	ClockSkew  time.Duration // how long past expiry before another owner may take over
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
	// SendOnly are the chains' send-only endpoints (TXFENCE_SEND_ONLY).
	SendOnly []SendOnly
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
	// ChainProfiles are TXFENCE_CHAIN_PROFILES's entries: a chain's kind
	// and what it overrides (Profile resolves them).
	ChainProfiles map[uint64]ProfileSpec

	// DelegatedMaxInFlight is MaxInFlight for a signer whose account
	// carries an EIP-7702 delegation.
	DelegatedMaxInFlight int

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
	// TopicLifecycle publishes every lifecycle event on the completion
	// topic, not only the outcomes.
	TopicLifecycle bool
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
	EnvChainProfiles       = "TXFENCE_CHAIN_PROFILES"
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
	EnvTopicLifecycle      = "TXFENCE_TOPIC_LIFECYCLE"

	EnvDelegatedMaxInFlight = "TXFENCE_DELEGATED_MAX_IN_FLIGHT"
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
// signer read looks its signer up, and a scan grows with the signers.
func (c Config) indexed() Config {
	c.signerAt = make(map[common.Address]int, len(c.Signers))
	for i, s := range c.Signers {
		c.signerAt[s.Address] = i
	}
	return c
}

// Signer returns the configured signer for addr, if any.
func (c Config) Signer(addr common.Address) (Signer, bool) {
	return signerIn(c.Signers, c.signerAt, addr)
}

// signerIn finds addr among signers, through at when it indexes them.
func signerIn(signers []Signer, at map[common.Address]int, addr common.Address) (Signer, bool) {
	if i, ok := at[addr]; ok && i < len(signers) && signers[i].Address == addr {
		return signers[i], true
	}
	for _, s := range signers {
		if s.Address == addr {
			return s, true
		}
	}
	return Signer{}, false
}
