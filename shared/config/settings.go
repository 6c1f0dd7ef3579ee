package config

import "strings"

// setting is one environment variable: its name, its default as the
// variable would spell it ("" for none), how the reference shows the
// default when the variable's own spelling would not say it, what it
// means, and where Load puts it. This table is the one source of the
// settings: Load reads them in its order, Defaults are its defaults, and
// docs/configuration.md is written from it (ReferenceMarkdown).
type setting struct {
	env   string
	def   string
	shown string
	doc   string
	load  func(p *parser, c *Config) // nil: read by another part (documented here only)
}

// settingGroup is a section of the reference.
type settingGroup struct {
	title, intro string
	settings     []setting
}

// settingGroups are every setting, by section.
var settingGroups = []settingGroup{
	{
		title: "Process",
		settings: []setting{
			{env: EnvInstanceID, shown: "the revision or host name and 8 random hex digits",
				doc:  "names this process in lease owners, rows and logs",
				load: func(p *parser, c *Config) { p.str(EnvInstanceID, &c.InstanceID) }},
			{env: EnvLogLevel, def: "info", doc: "`debug`, `info`, `warn` or `error`",
				load: func(p *parser, c *Config) { p.str(EnvLogLevel, &c.LogLevel) }},
			{env: "TXFENCE_SECRETS", doc: "`NAME=projects/P/secrets/S/versions/V,...`: settings read from Secret Manager when the configuration loads, instead of from the environment (a secret with no version yet fails the load, retried at the next request)"},
		},
	},
	{
		title: "Telemetry",
		settings: []setting{
			{env: EnvTelemetry, def: string(TelemetryPrometheus),
				doc: "`prometheus` (metrics at the API's `/metrics`), `gcp` (also exported to Cloud Monitoring and sampled spans to Cloud Trace) or `none`",
				load: func(p *parser, c *Config) {
					var mode string
					if p.str(EnvTelemetry, &mode) {
						c.Telemetry.Mode = TelemetryMode(mode)
					}
				}},
			{env: EnvTelemetryProject, shown: "TXFENCE_PROJECT", doc: "the project metrics and traces go to, and log lines name their traces in",
				load: func(p *parser, c *Config) { p.str(EnvTelemetryProject, &c.Telemetry.Project) }},
			{env: EnvTraceSampleRatio, def: "0.01", doc: "the share of new traces recorded (`gcp`); a request that arrives with a trace follows its caller's decision",
				load: func(p *parser, c *Config) { p.float(EnvTraceSampleRatio, &c.Telemetry.SampleRatio) }},
			{env: EnvMetricsInterval, def: "60s", doc: "how often metrics are exported (`gcp`)",
				load: func(p *parser, c *Config) { p.duration(EnvMetricsInterval, &c.Telemetry.Interval) }},
		},
	},
	{
		title: "Database",
		intro: "One of `TXFENCE_DATABASE_URL` or `TXFENCE_DATABASES` is required.",
		settings: []setting{
			{env: EnvDatabaseURL, doc: "the PostgreSQL database (a URL or `key=value` DSN); with `TXFENCE_CLOUDSQL_INSTANCE`, its user and database name",
				load: func(p *parser, c *Config) { p.str(EnvDatabaseURL, &c.Database.URL) }},
			{env: EnvCloudSQLInstance, doc: "`project:region:instance`: connect through the Cloud SQL connector (lazy refresh)",
				load: func(p *parser, c *Config) { p.str(EnvCloudSQLInstance, &c.Database.Instance) }},
			{env: EnvDatabases, doc: "signers sharded over several databases, instead of `TXFENCE_DATABASE_URL`: `NAME[@PROJECT:REGION:INSTANCE]=URL[|...]`, the first the home shard (policies, API keys, the audit log)",
				load: func(p *parser, c *Config) { p.databases(EnvDatabases, &c.Shards) }},
			{env: EnvShardMap, doc: "with `TXFENCE_DATABASES`: which shard holds each signer, `vN:RULE[,RULE...]`, a rule `ADDRESS=SHARD` or `*=SHARD`; a shard refuses a process whose map is older than one it has seen",
				load: func(p *parser, c *Config) { p.shardMap(EnvShardMap, &c.ShardMap) }},
			{env: EnvCloudSQLIAMAuth, def: "false", doc: "IAM database authentication through the connector",
				load: func(p *parser, c *Config) { p.boolean(EnvCloudSQLIAMAuth, &c.Database.IAMAuth) }},
			{env: EnvCloudSQLPrivateIP, def: "false", doc: "reach Cloud SQL on its private IP",
				load: func(p *parser, c *Config) { p.boolean(EnvCloudSQLPrivateIP, &c.Database.PrivateIP) }},
			{env: EnvDBMaxConns, def: "10", doc: "connections in this process's pool (per shard)",
				load: func(p *parser, c *Config) { p.int32(EnvDBMaxConns, &c.Database.MaxConns) }},
			{env: EnvDBStatementTimeout, def: "15s", doc: "longest statement",
				load: func(p *parser, c *Config) { p.duration(EnvDBStatementTimeout, &c.Database.StatementTimeout) }},
			{env: EnvDBLockTimeout, def: "3s", doc: "longest wait for a lock (a create answers 503 past it)",
				load: func(p *parser, c *Config) { p.duration(EnvDBLockTimeout, &c.Database.LockTimeout) }},
			{env: EnvDBIdleInTxTimeout, def: "30s", doc: "a session idle inside a transaction this long is ended",
				load: func(p *parser, c *Config) { p.duration(EnvDBIdleInTxTimeout, &c.Database.IdleInTxTimeout) }},
		},
	},
	{
		title: "Callers",
		settings: []setting{
			{env: EnvAuth, doc: "how callers authenticate, comma-separated: `oidc` (Google-signed ID tokens), `apikey`, `dev` (no credential: every role; refused on Cloud Run)",
				load: func(p *parser, c *Config) { p.list(EnvAuth, &c.Auth.Methods) }},
			{env: EnvOIDCAudience, doc: "the audience ID tokens must carry (with `oidc`)",
				load: func(p *parser, c *Config) { p.str(EnvOIDCAudience, &c.Auth.Audience) }},
			{env: EnvPolicySeed, doc: "a JSON array of policies written on the first start for principals that have none (docs/policies.md)",
				load: func(p *parser, c *Config) { p.policies(EnvPolicySeed, &c.Auth.PolicySeed) }},
			{env: EnvRatePerSecond, def: "200", doc: "calls a second per principal and instance (a policy may say otherwise)",
				load: func(p *parser, c *Config) { p.float(EnvRatePerSecond, &c.Auth.RatePerSecond) }},
			{env: EnvRateBurst, def: "400", doc: "the principal rate's burst",
				load: func(p *parser, c *Config) { p.integer(EnvRateBurst, &c.Auth.RateBurst) }},
			{env: EnvSignerRatePerSecond, def: "2000", doc: "authorized creates a second per signer and instance",
				load: func(p *parser, c *Config) { p.float(EnvSignerRatePerSecond, &c.Auth.SignerRatePerSecond) }},
			{env: EnvMaxWaits, def: "20", doc: "a principal's concurrent completion long-polls per instance",
				load: func(p *parser, c *Config) { p.integer(EnvMaxWaits, &c.Auth.MaxWaits) }},
		},
	},
	{
		title: "Leases",
		settings: []setting{
			{env: EnvLeaseDuration, def: "10s", doc: "how long a signer's lease lasts unless renewed",
				load: func(p *parser, c *Config) { p.duration(EnvLeaseDuration, &c.Lease.Duration) }},
			{env: EnvLeaseRenew, def: "3s", doc: "how often a holder renews it",
				load: func(p *parser, c *Config) { p.duration(EnvLeaseRenew, &c.Lease.RenewEvery) }},
			{env: EnvClockSkew, def: "1s", doc: "how long past its expiry a lease may still be in use elsewhere before it is taken over",
				load: func(p *parser, c *Config) { p.duration(EnvClockSkew, &c.Lease.ClockSkew) }},
		},
	},
	{
		title: "Chains and signers",
		intro: "`TXFENCE_CHAINS` and `TXFENCE_SIGNERS` are required.",
		settings: []setting{
			{env: EnvChains, doc: "`CHAIN_ID=RPC_URL[|RPC_URL...][,...]`, the endpoints in order of preference: each one's head is followed, reads go to the healthiest (one lagging the best head or failing is passed over, a failing one retried with backoff) and fail over between them, broadcasts go to every healthy one at once; logs, errors and answers name a URL by scheme and host only; `none` for a process that dials no chain",
				load: func(p *parser, c *Config) { p.chains(EnvChains, &c.Chains, &c.NoChains) }},
			{env: EnvSigners, doc: "`ADDRESS[=KEY_REF][,...]`, key refs `local:env:VAR`, `local:file:PATH` or `kms:projects/.../cryptoKeyVersions/N`",
				load: func(p *parser, c *Config) { p.signers(EnvSigners, &c.Signers) }},
			{env: EnvNonceStateTimeout, def: "30s", doc: "how long the chain's pending nonce of a signer is trusted before allocation asks again",
				load: func(p *parser, c *Config) { p.duration(EnvNonceStateTimeout, &c.NonceStateTimeout) }},
			{env: EnvMaxInFlight, def: "64", doc: "a signer's broadcast but unmined transactions (STUCK included): a hot signer's broadcast rate is at most about this over the block time and receipt latency",
				load: func(p *parser, c *Config) { p.integer(EnvMaxInFlight, &c.MaxInFlight) }},
			{env: EnvDelegatedMaxInFlight, def: "1", doc: "the in-flight limit of a signer whose account carries an EIP-7702 delegation (its code begins with `0xef0100`): nodes hold one executable transaction of such a sender (geth, reth), so its later ones wait allocated and go out one by one as each is mined",
				load: func(p *parser, c *Config) { p.integer(EnvDelegatedMaxInFlight, &c.DelegatedMaxInFlight) }},
			{env: EnvChainProfiles, doc: "each chain's kind and what it overrides of it, as JSON (see [Chain profiles](#chain-profiles)); a chain not named is `generic`",
				load: func(p *parser, c *Config) { p.chainProfiles(EnvChainProfiles, &c.ChainProfiles) }},
			{env: EnvRPCMaxBatch, def: "100", doc: "most calls in one JSON-RPC batch (nodes and providers refuse batches past their own limit)",
				load: func(p *parser, c *Config) { p.integer(EnvRPCMaxBatch, &c.RPCMaxBatch) }},
		},
	},
	{
		title: "Send-only endpoints",
		intro: "Reads go to the healthiest of a chain's endpoints (`TXFENCE_CHAINS`) and broadcasts to every healthy one at once; these receive broadcasts too, and are never read from.",
		settings: []setting{
			{env: EnvSendOnly, doc: "`CHAIN_ID=NAME=URL[;fallback][;signers=ADDRESS|...][,...]`: with `fallback` the endpoint gets every broadcast that also goes to the chain's healthy endpoints (a broadcast node); without it it is private (a MEV-protected submission URL) and the broadcasts of the signers it names go to it only; `signers` makes it those signers' route on the chain (a signer has at most one); a create may name any of them, or `public` (the chain's read endpoints only), as its `sendVia`, which then routes every broadcast of that transaction instead of its signer's route, so a private endpoint may name no signer and take only such creates; the name, never the URL, is shown in logs, metrics and answers",
				load: func(p *parser, c *Config) { p.sendOnly(EnvSendOnly, &c.SendOnly) }},
		},
	},
	{
		title: "Creates",
		settings: []setting{
			{env: EnvBatchSize, def: "100", doc: "creates in one allocation call",
				load: func(p *parser, c *Config) { p.integer(EnvBatchSize, &c.BatchSize) }},
			{env: EnvBatchWait, def: "0s", doc: "how long a short batch waits for more requests before its call",
				load: func(p *parser, c *Config) { p.duration(EnvBatchWait, &c.BatchWait) }},
			{env: EnvContendedWait, def: "3ms", doc: "the same for signers other instances allocate for at once: their calls queue on the lease row anyway",
				load: func(p *parser, c *Config) { p.duration(EnvContendedWait, &c.ContendedWait) }},
			{env: EnvWorkers, def: "2", doc: "allocation calls an instance has in flight (a signer is in at most one): a lane for the signers that are not contended, and one for those that are",
				load: func(p *parser, c *Config) { p.integer(EnvWorkers, &c.Workers) }},
			{env: EnvMaxGasLimit, def: "30000000", doc: "the largest gas limit a create may ask for or be estimated at",
				load: func(p *parser, c *Config) { p.uint(EnvMaxGasLimit, &c.MaxGasLimit) }},
			{env: EnvMaxDataBytes, def: "131072", doc: "the largest calldata a create may carry",
				load: func(p *parser, c *Config) { p.integer(EnvMaxDataBytes, &c.MaxDataBytes) }},
		},
	},
	{
		title: "Fees",
		settings: []setting{
			{env: EnvMaxFeeCap, def: "10000000000000", shown: "10,000 gwei", doc: "the highest max fee per gas (or gas price) anything pays, and the highest a create or an admin may choose; a transaction's fee ceiling is the lower of this and its creator's `maxFeePerGas`",
				load: func(p *parser, c *Config) { p.bigInt(EnvMaxFeeCap, &c.MaxFeeCap) }},
			{env: EnvMaxTipCap, shown: "the fee cap", doc: "the highest tip an automatic attempt pays",
				load: func(p *parser, c *Config) { p.bigInt(EnvMaxTipCap, &c.MaxTipCap) }},
			{env: EnvMinPriorityFee, def: "1000000", shown: "0.001 gwei", doc: "no suggested tip is below this floor (geth's default miner minimum)",
				load: func(p *parser, c *Config) { p.bigInt(EnvMinPriorityFee, &c.MinPriorityFee) }},
			{env: EnvTxFeeCap, def: "1000000000000000000", shown: "1 ether", doc: "the nodes' cap on a transaction's fee, gas limit × max fee per gas (geth's `--rpc.txfeecap`), counted with the data fee on a chain that charges one: a create whose own fee passes it is 422, every attempt is held under it; `0`: none",
				load: func(p *parser, c *Config) { p.bigInt(EnvTxFeeCap, &c.TxFeeCap) }},
			{env: EnvMaxBumps, def: "15", doc: "fee replacements per transaction; then STUCK `fee_cap_reached`",
				load: func(p *parser, c *Config) { p.integer(EnvMaxBumps, &c.MaxBumps) }},
			{env: EnvBumpAfter, def: "30s", doc: "replace an attempt of the next nonce to be mined that is not mined this long after its broadcast; first the node is asked: one it does not hold is sent again as it is, one priced like what recent blocks included waits up to four times this long, and a chain without a public mempool is never bumped on silence",
				load: func(p *parser, c *Config) { p.duration(EnvBumpAfter, &c.BumpAfter) }},
			{env: EnvBumpPercent, def: "20", doc: "each replacement pays at least this much more (fee and tip), never less than the nodes' 10",
				load: func(p *parser, c *Config) { p.integer(EnvBumpPercent, &c.BumpPercent) }},
			{env: EnvChainFees, doc: "per-chain overrides: `CHAIN_ID:maxFee=WEI,maxTip=WEI,minTip=WEI,txFeeCap=WEI,maxBumps=N[;CHAIN_ID:...]`",
				load: func(p *parser, c *Config) { p.chainFees(EnvChainFees, &c.ChainFees) }},
		},
	},
	{
		title: "Submitting and liveness",
		settings: []setting{
			{env: EnvSubmitBudget, def: "30s", doc: "how long one Submit invocation drains a signer before it hands on",
				load: func(p *parser, c *Config) { p.duration(EnvSubmitBudget, &c.SubmitBudget) }},
			{env: EnvResubmitInterval, def: "60s", doc: "rebroadcast an attempt no node has shown this long",
				load: func(p *parser, c *Config) { p.duration(EnvResubmitInterval, &c.ResubmitInterval) }},
			{env: EnvRecheckAfter, def: "15s", doc: "ask the node about the next nonce's attempt not mined this long after its broadcast; when the node lost it, rebroadcast it and every TRACKING transaction after it",
				load: func(p *parser, c *Config) { p.duration(EnvRecheckAfter, &c.RecheckAfter) }},
			{env: EnvResubmitBudget, def: "50s", doc: "how long one ResubmitSweep invocation sweeps",
				load: func(p *parser, c *Config) { p.duration(EnvResubmitBudget, &c.ResubmitBudget) }},
			{env: EnvResubmitPass, def: "5s", doc: "the ResubmitSweep's pause between passes",
				load: func(p *parser, c *Config) { p.duration(EnvResubmitPass, &c.ResubmitPass) }},
			{env: EnvMaxRebroadcasts, def: "10", doc: "rebroadcasts of the next nonce to be mined before it is STUCK",
				load: func(p *parser, c *Config) { p.integer(EnvMaxRebroadcasts, &c.MaxRebroadcasts) }},
			{env: EnvStuckAfter, def: "30m", doc: "a transaction pending this long, or failing to leave ALLOCATED this long, is STUCK",
				load: func(p *parser, c *Config) { p.duration(EnvStuckAfter, &c.StuckAfter) }},
			{env: EnvRetryBackoffMin, def: "5s", doc: "the first wait after a failed round of work on a transaction, doubling per failure",
				load: func(p *parser, c *Config) { p.duration(EnvRetryBackoffMin, &c.RetryBackoffMin) }},
			{env: EnvRetryBackoffMax, def: "10m", doc: "the longest such wait",
				load: func(p *parser, c *Config) { p.duration(EnvRetryBackoffMax, &c.RetryBackoffMax) }},
			{env: EnvStuckPolicy, shown: "`*=noop`", doc: "stuck-resolution rules `SCOPE=ACTION[,...]`, scope `*`, `CHAIN_ID`, `ADDRESS` or `CHAIN_ID:ADDRESS` (the most specific wins), action `noop`, `bump`, `cancel`, `placeholder` or `webhook`",
				load: func(p *parser, c *Config) { p.stuckPolicy(EnvStuckPolicy, &c.StuckPolicy) }},
			{env: EnvStuckWebhookURL, doc: "where the `webhook` action asks",
				load: func(p *parser, c *Config) { p.str(EnvStuckWebhookURL, &c.StuckWebhook.URL) }},
			{env: EnvStuckWebhookSecret, doc: "its HMAC secret (at least 16 characters; never logged)",
				load: func(p *parser, c *Config) { p.str(EnvStuckWebhookSecret, &c.StuckWebhook.Secret) }},
			{env: EnvStuckWebhookTimeout, def: "5s", doc: "its time limit",
				load: func(p *parser, c *Config) { p.duration(EnvStuckWebhookTimeout, &c.StuckWebhook.Timeout) }},
		},
	},
	{
		title: "Receipts and finality",
		settings: []setting{
			{env: EnvReceiptWorkers, def: "10", doc: "signers a finality pass sweeps at once (raise it with many signers busy at once)",
				load: func(p *parser, c *Config) { p.integer(EnvReceiptWorkers, &c.ReceiptWorkers) }},
			{env: EnvReceiptWait, def: "20s", doc: "how long a Receipt check follows the chain's head for receipts still missing (answered 2xx after; the finality sweep checks what went stale)",
				load: func(p *parser, c *Config) { p.duration(EnvReceiptWait, &c.ReceiptWait) }},
			{env: EnvStaleReceiptTimeout, def: "60s", doc: "the finality sweep checks the receipts of TRACKING transactions untouched this long itself",
				load: func(p *parser, c *Config) { p.duration(EnvStaleReceiptTimeout, &c.StaleReceiptTimeout) }},
			{env: EnvFinalityMode, def: string(FinalityConfirmations), doc: "`confirmations` (a depth) or `finalized` (the chain's `finalized` tag)",
				load: func(p *parser, c *Config) {
					var mode string
					if p.str(EnvFinalityMode, &mode) {
						c.FinalityMode = FinalityMode(mode)
					}
				}},
			{env: EnvConfirmations, def: "20", doc: "the depth a receipt's block must reach (`confirmations`)",
				load: func(p *parser, c *Config) { p.uint(EnvConfirmations, &c.Confirmations) }},
			{env: EnvFinalityBudget, def: "65s", doc: "how long one FinalitySweep invocation sweeps: past the scheduler's minute, so that invocations overlap",
				load: func(p *parser, c *Config) { p.duration(EnvFinalityBudget, &c.FinalityBudget) }},
			{env: EnvFinalityInterval, def: "2s", doc: "the longest pause between finality passes (a pass starts as soon as a chain's head moves)",
				load: func(p *parser, c *Config) { p.duration(EnvFinalityInterval, &c.FinalityInterval) }},
			{env: EnvReorgWatch, def: "10m", doc: "how long reported outcomes' blocks stay watched for a reorg deeper than the depth (and `nonce_consumed_externally` outcomes re-checked); 0: not at all",
				load: func(p *parser, c *Config) { p.duration(EnvReorgWatch, &c.ReorgWatch) }},
		},
	},
	{
		title: "Pub/Sub",
		settings: []setting{
			{env: EnvProject, doc: "the Google Cloud project; set, outbox rows are published to Pub/Sub (`PUBSUB_EMULATOR_HOST` is honoured)",
				load: func(p *parser, c *Config) { p.str(EnvProject, &c.Project) }},
			{env: EnvTopicSubmit, def: "txfence-submit", doc: "the submit prompts' topic",
				load: func(p *parser, c *Config) { p.str(EnvTopicSubmit, &c.TopicSubmit) }},
			{env: EnvTopicReceipt, def: "txfence-receipt", doc: "the receipt prompts' topic",
				load: func(p *parser, c *Config) { p.str(EnvTopicReceipt, &c.TopicReceipt) }},
			{env: EnvTopicCompletion, def: "txfence-completion", doc: "the outcomes' topic",
				load: func(p *parser, c *Config) { p.str(EnvTopicCompletion, &c.TopicCompletion) }},
			{env: EnvTopicLifecycle, def: "false", doc: "publish every lifecycle event (accepted, broadcast, replaced, mined, reorged, ...) on the outcomes' topic too, each with the attribute lifecycle=true; off, the topic carries the outcomes only (the feed has them either way, with events=lifecycle)",
				load: func(p *parser, c *Config) { p.boolean(EnvTopicLifecycle, &c.TopicLifecycle) }},
		},
	},
}

// defaultOf is each setting's default, by variable.
var defaultOf = func() map[string]string {
	out := map[string]string{}
	for _, g := range settingGroups {
		for _, s := range g.settings {
			if s.def != "" {
				out[s.env] = s.def
			}
		}
	}
	return out
}()

// loadSettings reads every setting through lookup, a variable lookup
// falls back to its default, into a Config.
func loadSettings(lookup func(string) (string, bool)) (Config, []Problem) {
	c := Config{Telemetry: Telemetry{Service: "txfence"}}
	p := parser{lookup: func(env string) (string, bool) {
		if v, ok := lookup(env); ok && strings.TrimSpace(v) != "" {
			return v, true // blank is unset: the default stands
		}
		d, ok := defaultOf[env]
		return d, ok
	}}
	for _, g := range settingGroups {
		for _, s := range g.settings {
			if s.load != nil {
				s.load(&p, &c)
			}
		}
	}
	return c, p.errs
}

// referenceMarkdown is docs/configuration.md: every setting, by section,
// with its default and meaning (TestIssue46_ConfigurationDoc keeps the
// file equal to it; `go test ./shared/config -run ConfigurationDoc -update`
// writes it).
func referenceMarkdown() string {
	var b strings.Builder
	b.WriteString(`# Configuration

<!-- Generated from shared/config/settings.go by
     go test ./shared/config -run ConfigurationDoc -update
     Do not edit: change the table there. -->

Every setting is an environment variable, loaded once when a process
starts and validated: a bad or missing one stops the process with an error
that names each variable. A blank value is the same as none: the default
stands. Cloud Run's ` + "`K_SERVICE` and `K_REVISION`" + ` name the process in
telemetry and lease owners; ` + "`PUBSUB_EMULATOR_HOST`" + ` points Pub/Sub at an
emulator.
`)
	for _, g := range settingGroups {
		b.WriteString("\n## " + g.title + "\n\n")
		if g.intro != "" {
			b.WriteString(g.intro + "\n\n")
		}
		b.WriteString("| variable | default | what |\n|---|---|---|\n")
		for _, s := range g.settings {
			def := s.shown
			switch {
			case def != "":
			case s.def != "":
				def = "`" + s.def + "`"
			default:
				def = "none"
			}
			b.WriteString("| `" + s.env + "` | " + def + " | " + s.doc + " |\n")
		}
	}
	b.WriteString(profileReference())
	return b.String()
}
