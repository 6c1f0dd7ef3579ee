// Package stack runs txfence's whole system on one machine, as deployed:
// PostgreSQL (ephemeral, or DATABASE_URL), Pub/Sub (pstest on TCP, or an
// emulator at PUBSUB_EMULATOR_HOST) with the deployment's topics and a push
// bridge, an EVM chain (go-ethereum's simulated backend over HTTP JSON-RPC
// with a block ticker, or an RPC URL), funded development signers, one or
// more function-server processes running the same binary as Cloud Run, and
// tickers standing in for Cloud Scheduler (FinalitySweep, OutboxSweep,
// ResubmitSweep). `make dev`, `make e2e` and `make soak` use it.
//
// For fault soaks the stack injects faults into its real parts (faults.go):
// JSON-RPC faults through a proxy in front of the chain, SIGKILL, restart,
// SIGSTOP and SIGCONT of servers, a PostgreSQL restart, fee spikes, funding
// and reorgs of the simulated chain.
package stack

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5/pgxpool"

	gpubsub "cloud.google.com/go/pubsub/v2"

	"github.com/txfence/txfence/emulator/bridge"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/evm/rpcproxy"
	"github.com/txfence/txfence/shared/pgtest"
	"github.com/txfence/txfence/shared/postgres"
	"github.com/txfence/txfence/shared/pubsub"
	"github.com/txfence/txfence/shared/pubsub/pubsubtest"
	"github.com/txfence/txfence/shared/txm"
)

// Topic and subscription names of the deployment (terraform creates the same).
const (
	Project         = "txfence-local"
	TopicSubmit     = "txfence-submit"
	TopicReceipt    = "txfence-receipt"
	TopicCompletion = "txfence-completion"
	TopicDeadLetter = "txfence-deadletter"
	// SubCompletion is a pull subscription on the completion topic for local
	// consumers.
	SubCompletion = "txfence-completion-pull"
	// SubSubmit is the submit topic's push subscription (Bridge.Pause).
	SubSubmit  = "txfence-submit-push"
	subReceipt = "txfence-receipt-push"
	subDead    = "txfence-deadletter-pull"
)

// DefaultAuth is the servers' TXFENCE_AUTH unless Options.Auth says
// otherwise: development mode (a call without a credential is the principal
// "dev") and API keys.
const DefaultAuth = "dev,apikey"

// Options shape the stack. Zero values take the defaults noted.
type Options struct {
	ServerBinary  string        // the built functions/server binary (required)
	Servers       int           // function-server processes (1)
	Signers       int           // development signers (3)
	BlockTime     time.Duration // simulated block interval (1s)
	Confirmations uint64        // confirmations required (3)
	FirstPort     int           // port of the first server (0: any free port)
	DatabaseURL   string        // use this PostgreSQL instead of an ephemeral one
	Durable       bool          // the ephemeral PostgreSQL keeps fsync and synchronous commit on
	Preload       []string      // the ephemeral PostgreSQL's shared_preload_libraries (pg_stat_statements: the extension is created)
	PubSubHost    string        // use this Pub/Sub emulator instead of pstest
	RPCURL        string        // use this chain instead of the simulated one
	ScheduleEvery time.Duration // Cloud Scheduler stand-in period (5s)
	// Auth is the servers' TXFENCE_AUTH (DefaultAuth when empty).
	Auth         string
	Env          []string             // extra environment for the servers (after the stack's own: it wins)
	ServerEnv    func(i int) []string // extra environment for server i alone (after Env): a value each needs its own of, e.g. TXFENCE_PPROF_ADDR
	ServerOutput io.Writer            // where server logs go (discarded when nil)
	Log          *slog.Logger

	// FaultProxy puts an rpcproxy between the servers and the chain
	// (Stack.Proxy), to inject JSON-RPC errors, delays, dropped connections
	// and swallowed broadcasts.
	FaultProxy bool
	// LaggingEndpoint gives the chain a second endpoint (Stack.Lagging, a
	// second rpcproxy), after the first: a node that is down (every call
	// 503) until a fault makes it a node behind the chain (Lag). Needs
	// FaultProxy.
	LaggingEndpoint bool
	// BlockGasLimit of the simulated chain (go-ethereum's default, 60M,
	// when 0). FeeSpike fills blocks with one call of 9/10 of it, which must
	// stay under the per-transaction cap of 2^24 gas.
	BlockGasLimit uint64
	// MinerTip is the simulated chain's lowest includable priority fee, in
	// wei (evmtest.MinerTip when nil).
	MinerTip *big.Int
	// TxPoolQueue is how many transactions the simulated node holds per
	// account waiting for promotion (geth's 64 when 0). A signer keeping
	// more in flight (TXFENCE_MAX_IN_FLIGHT) needs a node that queues as
	// many, or a block landing while they wait drops the highest.
	TxPoolQueue uint64
}

// Stack is a running local txfence.
type Stack struct {
	APIURL      string   // base URL of the API (first server), e.g. http://127.0.0.1:8080/Api
	ServerURLs  []string // function servers, every function at /<Name>
	RPCURL      string   // the chain as the servers reach it (through Proxy when there is one)
	PubSubHost  string   // for PUBSUB_EMULATOR_HOST
	DatabaseURL string
	Signers     []common.Address
	Chain       *evmtest.Chain  // nil with an external chain
	Proxy       *rpcproxy.Proxy // between servers and chain; nil without Options.FaultProxy
	Lagging     *rpcproxy.Proxy // the chain's second endpoint; nil without Options.LaggingEndpoint
	Bridge      *bridge.Bridge
	Funder      common.Address // a funded account txfence does not manage (Fund)

	opts    Options
	keys    []*ecdsa.PrivateKey
	funder  evmtest.DevKey
	spammer evmtest.DevKey
	pg      *pgtest.Server // nil with an external database
	servers []*server
	closers []func()
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	fundMu sync.Mutex // one funding transfer at a time (the funder's nonces)
	spike  struct {
		sync.Mutex
		stop chan struct{}
		done chan struct{}
	}
	hold holdState // HoldChain
}

// server is one function-server process. Its port stays across restarts.
type server struct {
	index int
	url   string
	port  int

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
	dead   bool          // killed and not restarted
	paused bool          // SIGSTOPped
	starts int           // processes started on this port
}

// Start brings everything up and returns when the first server answers.
func Start(ctx context.Context, opts Options) (_ *Stack, err error) {
	if opts.ServerBinary == "" {
		return nil, errors.New("stack: ServerBinary is required")
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&opts.Servers, 1)
	def(&opts.Signers, 3)
	if opts.BlockTime == 0 {
		opts.BlockTime = time.Second
	}
	if opts.Confirmations == 0 {
		opts.Confirmations = 3
	}
	if opts.ScheduleEvery == 0 {
		opts.ScheduleEvery = 5 * time.Second
	}
	if opts.Auth == "" {
		opts.Auth = DefaultAuth
	}
	s := &Stack{opts: opts}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel

	if err := s.startDatabase(ctx); err != nil {
		return nil, err
	}
	for _, k := range evmtest.DevKeys(opts.Signers) {
		s.keys = append(s.keys, k.Key)
		s.Signers = append(s.Signers, k.Address)
	}
	s.funder, s.spammer = evmtest.NamedDevKey("funder"), evmtest.NamedDevKey("spammer")
	s.Funder = s.funder.Address
	if err := s.startChain(); err != nil {
		return nil, err
	}
	client, err := s.startPubSub(ctx)
	if err != nil {
		return nil, err
	}
	s.warnOverridden()
	for i := 0; i < opts.Servers; i++ {
		port := 0
		if opts.FirstPort != 0 {
			port = opts.FirstPort + i
		} else if port, err = FreePort(); err != nil {
			return nil, err
		}
		srv := &server{index: i, url: fmt.Sprintf("http://127.0.0.1:%d", port), port: port}
		if err := s.startServer(srv); err != nil {
			return nil, err
		}
		s.servers = append(s.servers, srv)
		s.ServerURLs = append(s.ServerURLs, srv.url)
	}
	s.APIURL = s.ServerURLs[0] + "/Api"
	for _, u := range s.ServerURLs {
		if err := WaitReady(ctx, u+"/Api/healthz"); err != nil {
			return nil, err
		}
	}

	var submit, receipt []string
	for _, u := range s.ServerURLs {
		submit = append(submit, u+"/Submit")
		receipt = append(receipt, u+"/Receipt")
	}
	s.Bridge, err = bridge.New(client, Project, []bridge.Route{
		{Subscription: SubSubmit, Endpoints: submit},
		// A Receipt check follows the chain's head for up to
		// TXFENCE_RECEIPT_WAIT, as Pub/Sub push lets it (its endpoints take
		// as many at once as they accept): the default 16 deliveries at once
		// held every other signer's receipt prompts back behind them.
		{Subscription: subReceipt, Endpoints: receipt, Concurrency: 256},
	}, bridge.Options{MaxAttempts: 10, MinBackoff: 200 * time.Millisecond, MaxBackoff: 5 * time.Second, DeadLetterTopic: TopicDeadLetter}, opts.Log)
	if err != nil {
		return nil, err
	}
	s.goRun(func() { _ = s.Bridge.Run(runCtx) })
	s.goRun(func() { s.schedule(runCtx, "/FinalitySweep", opts.ScheduleEvery) })
	s.goRun(func() { s.schedule(runCtx, "/OutboxSweep", 2*opts.ScheduleEvery) })
	s.goRun(func() { s.schedule(runCtx, "/ResubmitSweep", 2*opts.ScheduleEvery) })
	return s, nil
}

func (s *Stack) goRun(fn func()) {
	s.wg.Add(1)
	go func() { defer s.wg.Done(); fn() }()
}

func (s *Stack) startDatabase(ctx context.Context) error {
	if s.opts.DatabaseURL != "" {
		s.DatabaseURL = s.opts.DatabaseURL
	} else {
		srv, err := pgtest.Start(ctx, pgtest.Options{Durable: s.opts.Durable, Preload: s.opts.Preload})
		if err != nil {
			return err
		}
		s.pg = srv
		s.closers = append(s.closers, func() { _ = srv.Stop() })
		admin, err := pgxpool.New(ctx, srv.URL("postgres"))
		if err != nil {
			return err
		}
		_, err = admin.Exec(ctx, "CREATE DATABASE txfence")
		admin.Close()
		if err != nil {
			return fmt.Errorf("create database: %w", err)
		}
		s.DatabaseURL = srv.URL("txfence")
	}
	pool, err := pgxpool.New(ctx, s.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := postgres.MigrateUp(ctx, pool); err != nil {
		return err
	}
	return createStatements(ctx, pool, s.opts.Preload)
}

// funderBalance is the funder's genesis balance: a billion ether.
var funderBalance = new(big.Int).Mul(big.NewInt(1_000_000_000), big.NewInt(1e18))

func (s *Stack) startChain() error {
	if s.opts.RPCURL != "" {
		s.RPCURL = s.opts.RPCURL
		s.opts.Log.Warn("external chain: the development signers must be funded there", slog.Any("signers", s.Signers))
	} else {
		devKeys := []evmtest.DevKey{s.spammer}
		for i, k := range s.keys {
			devKeys = append(devKeys, evmtest.DevKey{Key: k, Address: s.Signers[i]})
		}
		alloc := evmtest.FundedAlloc(devKeys, nil)
		alloc[s.funder.Address] = types.Account{Balance: new(big.Int).Set(funderBalance)}
		alloc[evmtest.GasBurner] = evmtest.GasBurnerAccount()
		var opts []evmtest.Option
		if s.opts.BlockGasLimit != 0 {
			opts = append(opts, evmtest.WithBlockGasLimit(s.opts.BlockGasLimit))
		}
		if s.opts.MinerTip != nil {
			opts = append(opts, evmtest.WithMinerTip(s.opts.MinerTip))
		}
		if s.opts.TxPoolQueue != 0 {
			opts = append(opts, evmtest.WithTxPoolQueue(s.opts.TxPoolQueue))
		}
		c, err := evmtest.New(alloc, opts...)
		if err != nil {
			return err
		}
		s.Chain, s.RPCURL = c, c.URL
		stop := s.mine(c, s.opts.BlockTime)
		s.closers = append(s.closers, func() { s.EndFeeSpike(); stop(); _ = c.Close() })
	}
	if s.opts.FaultProxy {
		p, err := rpcproxy.New(s.RPCURL)
		if err != nil {
			return err
		}
		chainURL := s.RPCURL
		s.Proxy, s.RPCURL = p, p.URL
		s.closers = append(s.closers, p.Close)
		if s.opts.LaggingEndpoint {
			l, err := rpcproxy.New(chainURL)
			if err != nil {
				return err
			}
			l.FailAll(LaggingDown)
			s.Lagging = l
			s.closers = append(s.closers, l.Close)
		}
	}
	return nil
}

// LaggingDown is how the second endpoint answers while it is down.
var LaggingDown = rpcproxy.Fault{HTTPStatus: 503}

// chainURLs is TXFENCE_CHAINS's list of the chain's endpoints.
func (s *Stack) chainURLs() string {
	if s.Lagging != nil {
		return s.RPCURL + "|" + s.Lagging.URL
	}
	return s.RPCURL
}

func (s *Stack) startPubSub(ctx context.Context) (*gpubsub.Client, error) {
	var srv *pubsubtest.Server
	if s.opts.PubSubHost != "" {
		s.PubSubHost = s.opts.PubSubHost
		os.Setenv("PUBSUB_EMULATOR_HOST", s.PubSubHost)
		c, err := pubsub.Dial(ctx, Project)
		if err != nil {
			return nil, err
		}
		srv = &pubsubtest.Server{Addr: s.PubSubHost, Project: Project, Client: c}
		s.closers = append(s.closers, func() { _ = c.Close() })
	} else {
		var err error
		if srv, err = pubsubtest.Start(ctx, Project); err != nil {
			return nil, err
		}
		s.PubSubHost = srv.Addr
		s.closers = append(s.closers, func() { _ = srv.Close() })
	}
	for _, t := range []string{TopicSubmit, TopicReceipt, TopicCompletion, TopicDeadLetter} {
		if err := srv.CreateTopic(ctx, t); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return nil, fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	for _, sub := range []struct {
		id, topic string
		ordered   bool
	}{{SubSubmit, TopicSubmit, false}, {subReceipt, TopicReceipt, false}, {SubCompletion, TopicCompletion, true}, {subDead, TopicDeadLetter, false}} {
		if err := srv.CreateSubscription(ctx, sub.id, sub.topic, sub.ordered); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return nil, fmt.Errorf("create subscription %s: %w", sub.id, err)
		}
	}
	return srv.Client, nil
}

// serverEnv is the configuration every function server gets: the stack's
// own, then Options.Env.
func (s *Stack) serverEnv() []string {
	return append(s.stackEnv(), s.opts.Env...)
}

// warnOverridden logs each variable of the caller's environment that the
// stack sets to another value for its servers, so that a setting meant for
// them is not dropped without a word.
func (s *Stack) warnOverridden() {
	for _, kv := range s.stackEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if mine, ok := os.LookupEnv(k); ok && mine != v && !slices.ContainsFunc(s.opts.Env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			s.opts.Log.Warn("the local stack sets this variable for its servers; the environment's value is not used", slog.String("variable", k))
		}
	}
}

// stackEnv is the configuration the stack gives every function server.
func (s *Stack) stackEnv() []string {
	var signers []string
	env := []string{
		"TXFENCE_DATABASE_URL=" + s.DatabaseURL,
		"TXFENCE_CHAINS=" + fmt.Sprint(evmtest.ChainID) + "=" + s.chainURLs(),
		"TXFENCE_PROJECT=" + Project,
		"PUBSUB_EMULATOR_HOST=" + s.PubSubHost,
		"TXFENCE_TOPIC_SUBMIT=" + TopicSubmit,
		"TXFENCE_TOPIC_RECEIPT=" + TopicReceipt,
		"TXFENCE_TOPIC_COMPLETION=" + TopicCompletion,
		fmt.Sprintf("TXFENCE_CONFIRMATIONS=%d", s.opts.Confirmations),
		// Overlapping invocations, as deployed: no gap between sweeps.
		"TXFENCE_FINALITY_BUDGET=" + (s.opts.ScheduleEvery + s.opts.ScheduleEvery/5).String(),
		"TXFENCE_FINALITY_INTERVAL=500ms",
		// Blocks come every second here: a receipt not seen within one is
		// looked for by the next finality pass, as a Receipt retry would.
		"TXFENCE_STALE_RECEIPT_TIMEOUT=1s",
		"TXFENCE_RESUBMIT_INTERVAL=10s",
		// A next nonce unmined for three blocks is asked about: a node that
		// dropped it holds every later nonce back.
		"TXFENCE_RECHECK_AFTER=" + (3 * s.opts.BlockTime).String(),
		"TXFENCE_RESUBMIT_PASS_INTERVAL=1s",
		"TXFENCE_LEASE_DURATION=3s",
		"TXFENCE_LEASE_RENEW=1s",
		"TXFENCE_CLOCK_SKEW=500ms",
		"TXFENCE_SUBMIT_BUDGET=20s",
		"TXFENCE_LOG_LEVEL=info",
		"TXFENCE_AUTH=" + s.opts.Auth,
	}
	for i, k := range s.keys {
		v := fmt.Sprintf("TXFENCE_DEV_KEY_%d", i)
		env = append(env, v+"="+hex.EncodeToString(crypto.FromECDSA(k))) // DEVELOPMENT ONLY keys
		signers = append(signers, txm.CanonicalAddress(s.Signers[i])+"=local:env:"+v)
	}
	return append(env, "TXFENCE_SIGNERS="+strings.Join(signers, ","))
}

// startServer starts srv's process on its port. The caller holds no lock
// on srv.
func (s *Stack) startServer(srv *server) error {
	// Every process is a new instance with an owner id of its own: a
	// restarted server must not renew the leases of the one it replaces.
	srv.mu.Lock()
	srv.starts++
	id := fmt.Sprintf("local-%d", srv.port)
	if srv.starts > 1 {
		id += fmt.Sprintf("-r%d", srv.starts-1)
	}
	srv.mu.Unlock()
	cmd := exec.Command(s.opts.ServerBinary)
	cmd.Env = append(append(os.Environ(), s.serverEnv()...), "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", srv.port),
		"TXFENCE_INSTANCE_ID="+id)
	if s.opts.ServerEnv != nil {
		cmd.Env = append(cmd.Env, s.opts.ServerEnv(srv.index)...)
	}
	out := s.opts.ServerOutput
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start function server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	srv.mu.Lock()
	srv.cmd, srv.exited, srv.dead, srv.paused = cmd, exited, false, false
	srv.mu.Unlock()
	return nil
}

// schedule calls path on the live servers in turn, every period, as Cloud
// Scheduler calls the sweep functions: each call on its own, so that a
// server that hangs (SIGSTOP) delays only the calls it was given.
func (s *Stack) schedule(ctx context.Context, path string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	client := &http.Client{Timeout: 2 * every}
	var calls sync.WaitGroup
	defer calls.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		srv := s.servers[i%len(s.servers)]
		if srv.isDead() {
			continue
		}
		calls.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.url+path, nil)
			resp, err := client.Do(req)
			if err != nil {
				s.opts.Log.Debug("scheduler call failed", slog.String("path", path), slog.Any("error", err))
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
}

func (srv *server) isDead() bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.dead
}

// Close stops everything and removes temporary data.
func (s *Stack) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	for _, srv := range s.servers {
		srv.mu.Lock()
		cmd, exited, dead, paused := srv.cmd, srv.exited, srv.dead, srv.paused
		srv.mu.Unlock()
		if dead || cmd == nil {
			continue
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if paused {
			_ = cmd.Process.Signal(syscall.SIGCONT)
		}
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	s.wg.Wait()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	return nil
}

// WaitReady polls url until it answers 204 No Content (a function server's
// health route), for at most a minute.
func WaitReady(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready: %s", url, last)
}

// FreePort returns a port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
