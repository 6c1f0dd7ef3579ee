// Package deps builds, once per process and lazily, the clients every
// function shares: configuration, the database pool and store, the chain
// clients, metrics and the logger. A failed build is retried by the next
// request, so a database that is down at the first request does not brick
// the instance.
package deps

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	kmsapi "cloud.google.com/go/kms/apiv1"
	gpubsub "cloud.google.com/go/pubsub/v2"
	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/evm"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/secrets"
	"github.com/txfence/txfence/shared/stuckpolicy"
	"github.com/txfence/txfence/shared/telemetry"
	"github.com/txfence/txfence/shared/txm"
)

// Process is what one process shares across invocations.
type Process struct {
	Config config.Config
	// DB is the home shard's (the first of TXFENCE_DATABASES, or the one
	// database), which also holds policies, API keys and the audit log.
	DB     *postgres.DB
	Chains map[uint64]*evm.Client
	// Shards are the databases in configuration order: one, named "",
	// without TXFENCE_DATABASES. Router maps signers to them; every
	// signer's work goes through its shard.
	Shards []*Shard
	Router *app.ShardRouter
	// mapCheck is the check of the signer map against the home shard's
	// history, once per process.
	mapCheck checkOnce
	// PolicyStore is set by Auth.
	PolicyStore txm.PolicyStore
	// Metrics are the instruments and the tracer TXFENCE_TELEMETRY asks
	// for; nil with "none".
	Metrics *metrics.Metrics
	Log     *slog.Logger

	telemetry telemetry.Shutdown

	publisher *pubsub.Publisher
	pubsub    *gpubsub.Client
	signersMu sync.Mutex
	signers   map[common.Address]txm.Signer
	stuckMu   sync.Mutex
	stuck     txm.StuckResolutionHook
	authMu    sync.Mutex
	authn     txm.Authenticator
	policies  *app.Policies
	kms       *kmsapi.KeyManagementClient
}

var (
	mu   sync.Mutex
	proc *Process
)

// Get returns the process's dependencies, building them from the
// environment on first use.
func Get(ctx context.Context) (*Process, error) {
	mu.Lock()
	defer mu.Unlock()
	if proc != nil {
		return proc, nil
	}
	env, err := environment(ctx)
	if err != nil {
		return nil, err
	}
	cfg, err := config.Load(env)
	if err != nil {
		return nil, err
	}
	p, err := Build(ctx, cfg)
	if err != nil {
		return nil, err
	}
	proc = p
	return p, nil
}

// secretClient reads the settings TXFENCE_SECRETS names; built by the
// first load that needs it (under mu).
var secretClient *secrets.Client

// environment is the process's environment, with the settings
// TXFENCE_SECRETS names read from Secret Manager. A secret that has no
// version yet fails the load, and the next request loads again.
func environment(ctx context.Context) (func(string) (string, bool), error) {
	spec := os.Getenv(secrets.EnvSecrets)
	if strings.TrimSpace(spec) == "" {
		return os.LookupEnv, nil
	}
	if secretClient == nil {
		c, err := secrets.New(ctx)
		if err != nil {
			return nil, err
		}
		secretClient = c
	}
	return secrets.Lookup(ctx, secretClient, spec, os.LookupEnv)
}

// Shutdown deletes the outbox rows the process published and has not
// deleted yet, and exports its telemetry that is not exported yet (the
// function server calls it when Cloud Run stops the instance).
func Shutdown(ctx context.Context) error {
	mu.Lock()
	p := proc
	mu.Unlock()
	if p == nil {
		return nil
	}
	p.flushRelays(ctx)
	return p.telemetry(ctx)
}

// flushRelays deletes the published outbox rows each shard's relay holds
// for its next delete.
func (p *Process) flushRelays(ctx context.Context) {
	for _, sh := range p.Shards {
		sh.Relay.Flush(ctx)
	}
}

// Build connects everything cfg names.
func Build(ctx context.Context, cfg config.Config) (*Process, error) {
	log := logging.New(os.Stderr, cfg.LogLevel, cfg.TelemetryProject()).With(slog.String("instance", cfg.InstanceID))
	m, shutdown, err := telemetry.Setup(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	p := &Process{Config: cfg, Chains: map[uint64]*evm.Client{}, Metrics: m, Log: log, telemetry: shutdown}
	if err := p.openShards(ctx); err != nil {
		p.Close()
		return nil, err
	}
	if cfg.Project != "" {
		// PUBSUB_EMULATOR_HOST, when set, is honoured by the client itself.
		c, err := pubsub.Dial(ctx, cfg.Project)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("pubsub: %w", err)
		}
		p.pubsub = c
		if p.publisher, err = pubsub.NewPublisher(c, cfg.Project); err != nil {
			p.Close()
			return nil, err
		}
		// Prompts go to push subscriptions without message ordering; the
		// completion feed keeps the signer as its ordering key.
		p.publisher.Unordered(cfg.TopicSubmit, cfg.TopicReceipt)
		for _, sh := range p.Shards {
			if sh.Relay, err = app.NewRelay(sh.Store, p.publisher, log); err != nil {
				p.Close()
				return nil, err
			}
		}
	}
	for _, ch := range cfg.Chains {
		opts := evm.DefaultOptions()
		opts.MaxBatch = cfg.RPCMaxBatch
		opts.Log = log
		c, err := evm.Dial(ctx, ch.ID, ch.RPCURLs, EndpointOptions(ChainOptions(opts, cfg.Profile(ch.ID)), cfg, ch.ID))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("chain %d: %w", ch.ID, err)
		}
		p.Chains[ch.ID] = c
		m.WatchEndpoints(ch.ID, c)
	}
	return p, nil
}

// Auth is the authenticator and the policy source the configuration
// names, built once; the first build writes the policy seed (version 1 of
// each principal that has none).
func (p *Process) Auth(ctx context.Context) (txm.Authenticator, *app.Policies, error) {
	p.authMu.Lock()
	defer p.authMu.Unlock()
	if p.authn == nil {
		store, err := postgres.NewPolicies(p.DB.Pool)
		if err != nil {
			return nil, nil, err
		}
		keys, err := postgres.NewAPIKeys(p.DB.Pool)
		if err != nil {
			return nil, nil, err
		}
		audit, err := postgres.NewAuditLog(p.DB.Pool)
		if err != nil {
			return nil, nil, err
		}
		if err := store.SeedPolicies(ctx, p.Config.Auth.PolicySeed); err != nil {
			return nil, nil, err
		}
		a, err := auth.New(p.Config.Auth, keys)
		if err != nil {
			return nil, nil, err
		}
		pols, err := app.NewPolicies(store, audit, p.Metrics, p.Log)
		if err != nil {
			return nil, nil, err
		}
		p.PolicyStore = store
		if p.Config.Auth.Has("dev") {
			p.Log.WarnContext(ctx, "DEVELOPMENT MODE: calls without credentials act as the all-powerful principal \"dev\" (TXFENCE_AUTH=dev); never deploy this")
		}
		p.authn, p.policies = a, pols
	}
	return p.authn, p.policies, nil
}

// StuckPolicy is the stuck-resolution policy the configuration names
// (TXFENCE_STUCK_POLICY, with the webhook where a rule says so), built once.
func (p *Process) StuckPolicy() (txm.StuckResolutionHook, error) {
	p.stuckMu.Lock()
	defer p.stuckMu.Unlock()
	if p.stuck == nil {
		h, err := stuckpolicy.FromConfig(p.Config)
		if err != nil {
			return nil, err
		}
		p.stuck = h
	}
	return p.stuck, nil
}

// ChainOptions are opts with a chain's profile: its fee cap, tip cap and
// tip floor bound every fee the client suggests, its fee strategy says
// where the tip comes from, its data fee kind how creates price the data
// fee, whether it has a public mempool how unmined transactions are sent
// again, and its block time and lag bound how its endpoints' heads are
// followed.
func ChainOptions(opts evm.Options, p config.ChainProfile) evm.Options {
	opts.MaxFeeCap = p.Fees.MaxFee
	opts.MaxPriorityFeeCap = p.Fees.MaxTip
	opts.MinPriorityFee = p.Fees.MinTip
	opts.TipFromFeeHistory = p.TipSource == config.TipFeeHistory
	opts.FeeHistoryPercentile = p.FeeHistoryPercentile
	opts.FeeHistoryBlocks = p.FeeHistoryBlocks
	opts.NoPublicMempool = !p.PublicMempool
	opts.LagBlocks = p.LagBlocks
	opts.HeadInterval = p.BlockTime
	if p.DataFee != config.DataFeeNone {
		opts.DataFee = evm.DataFeeKind(p.DataFee)
	}
	return opts
}

// EndpointOptions are opts with chain id's send-only endpoints and the
// routes of the signers they name (TXFENCE_SEND_ONLY).
func EndpointOptions(opts evm.Options, cfg config.Config, id uint64) evm.Options {
	opts.SendOnly, opts.Routes = nil, nil
	for _, s := range cfg.SendOnlyFor(id) {
		opts.SendOnly = append(opts.SendOnly, evm.SendOnlyEndpoint{Name: s.Name, URL: s.URL, PublicFallback: s.PublicFallback})
		for _, a := range s.Signers {
			if opts.Routes == nil {
				opts.Routes = map[common.Address]string{}
			}
			opts.Routes[a] = s.Name
		}
	}
	return opts
}

// Close releases every client and stops the telemetry exporters.
func (p *Process) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.flushRelays(ctx)
	if p.telemetry != nil {
		_ = p.telemetry(ctx)
	}
	for _, c := range p.Chains {
		c.Close()
	}
	if p.publisher != nil {
		p.publisher.Close()
	}
	if p.pubsub != nil {
		_ = p.pubsub.Close()
	}
	if p.kms != nil {
		_ = p.kms.Close()
	}
	for _, sh := range p.Shards {
		sh.DB.Close()
	}
}
