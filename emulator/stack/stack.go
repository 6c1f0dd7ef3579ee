// Package stack runs txfence's whole system on one machine, as deployed:
// PostgreSQL (ephemeral, or DATABASE_URL), Pub/Sub (pstest on TCP, or an
// emulator at PUBSUB_EMULATOR_HOST) with the deployment's topics and a push
// bridge, an EVM chain (go-ethereum's simulated backend over HTTP JSON-RPC
// with a block ticker, or an RPC URL), funded development signers, one or
// more function-server processes running the same binary as Cloud Run, and
// tickers standing in for Cloud Scheduler (FinalitySweep, OutboxSweep,
// ResubmitSweep). `make dev` and `make e2e` use it.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/jackc/pgx/v5/pgxpool"

	gpubsub "cloud.google.com/go/pubsub/v2"

	"github.com/txfence/txfence/emulator/bridge"
	"github.com/txfence/txfence/shared/evm/evmtest"
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
	subSubmit     = "txfence-submit-push"
	subReceipt    = "txfence-receipt-push"
	subDead       = "txfence-deadletter-pull"
)

// Options shape the stack. Zero values take the defaults noted.
type Options struct {
	ServerBinary  string        // the built functions/server binary (required)
	Servers       int           // function-server processes (1)
	Signers       int           // development signers (3)
	BlockTime     time.Duration // simulated block interval (1s)
	Confirmations uint64        // confirmations required (3)
	FirstPort     int           // port of the first server (0: any free port)
	DatabaseURL   string        // use this PostgreSQL instead of an ephemeral one
	PubSubHost    string        // use this Pub/Sub emulator instead of pstest
	RPCURL        string        // use this chain instead of the simulated one
	ScheduleEvery time.Duration // Cloud Scheduler stand-in period (5s)
	Env           []string      // extra environment for the servers
	ServerOutput  io.Writer     // where server logs go (discarded when nil)
	Log           *slog.Logger
}

// Stack is a running local txfence.
type Stack struct {
	APIURL      string   // base URL of the API (first server), e.g. http://127.0.0.1:8080/Api
	ServerURLs  []string // function servers, every function at /<Name>
	RPCURL      string
	PubSubHost  string // for PUBSUB_EMULATOR_HOST
	DatabaseURL string
	Signers     []common.Address
	Chain       *evmtest.Chain // nil with an external chain
	Bridge      *bridge.Bridge

	opts    Options
	keys    []*ecdsa.PrivateKey
	servers []*server
	closers []func()
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type server struct {
	url  string
	cmd  *exec.Cmd
	mu   sync.Mutex
	dead bool
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
	if err := s.startChain(); err != nil {
		return nil, err
	}
	client, err := s.startPubSub(ctx)
	if err != nil {
		return nil, err
	}
	for i := 0; i < opts.Servers; i++ {
		port := 0
		if opts.FirstPort != 0 {
			port = opts.FirstPort + i
		}
		srv, err := s.startServer(port)
		if err != nil {
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
		{Subscription: subSubmit, Endpoints: submit},
		{Subscription: subReceipt, Endpoints: receipt},
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
		srv, err := pgtest.Start(ctx, pgtest.Options{})
		if err != nil {
			return err
		}
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
	return postgres.MigrateUp(ctx, pool)
}

func (s *Stack) startChain() error {
	if s.opts.RPCURL != "" {
		s.RPCURL = s.opts.RPCURL
		s.opts.Log.Warn("external chain: the development signers must be funded there", slog.Any("signers", s.Signers))
		return nil
	}
	var devKeys []evmtest.DevKey
	for i, k := range s.keys {
		devKeys = append(devKeys, evmtest.DevKey{Key: k, Address: s.Signers[i]})
	}
	c, err := evmtest.New(evmtest.FundedAlloc(devKeys, nil))
	if err != nil {
		return err
	}
	s.Chain, s.RPCURL = c, c.URL
	stop := c.StartMining(s.opts.BlockTime)
	s.closers = append(s.closers, func() { stop(); _ = c.Close() })
	return nil
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
	}{{subSubmit, TopicSubmit, false}, {subReceipt, TopicReceipt, false}, {SubCompletion, TopicCompletion, true}, {subDead, TopicDeadLetter, false}} {
		if err := srv.CreateSubscription(ctx, sub.id, sub.topic, sub.ordered); err != nil && !strings.Contains(err.Error(), "AlreadyExists") {
			return nil, fmt.Errorf("create subscription %s: %w", sub.id, err)
		}
	}
	return srv.Client, nil
}

// serverEnv is the configuration every function server gets.
func (s *Stack) serverEnv() []string {
	var signers []string
	env := []string{
		"TXFENCE_DATABASE_URL=" + s.DatabaseURL,
		"TXFENCE_CHAINS=" + fmt.Sprint(evmtest.ChainID) + "=" + s.RPCURL,
		"TXFENCE_PROJECT=" + Project,
		"PUBSUB_EMULATOR_HOST=" + s.PubSubHost,
		"TXFENCE_TOPIC_SUBMIT=" + TopicSubmit,
		"TXFENCE_TOPIC_RECEIPT=" + TopicReceipt,
		"TXFENCE_TOPIC_COMPLETION=" + TopicCompletion,
		fmt.Sprintf("TXFENCE_CONFIRMATIONS=%d", s.opts.Confirmations),
		"TXFENCE_FINALITY_BUDGET=" + (s.opts.ScheduleEvery - s.opts.ScheduleEvery/5).String(),
		"TXFENCE_FINALITY_INTERVAL=500ms",
		"TXFENCE_STALE_RECEIPT_TIMEOUT=5s",
		"TXFENCE_RESUBMIT_INTERVAL=10s",
		"TXFENCE_LEASE_DURATION=3s",
		"TXFENCE_LEASE_RENEW=1s",
		"TXFENCE_CLOCK_SKEW=500ms",
		"TXFENCE_SUBMIT_BUDGET=20s",
		"TXFENCE_LOG_LEVEL=info",
	}
	for i, k := range s.keys {
		v := fmt.Sprintf("TXFENCE_DEV_KEY_%d", i)
		env = append(env, v+"="+hex.EncodeToString(crypto.FromECDSA(k))) // DEVELOPMENT ONLY keys
		signers = append(signers, txm.CanonicalAddress(s.Signers[i])+"=local:env:"+v)
	}
	env = append(env, "TXFENCE_SIGNERS="+strings.Join(signers, ","))
	return append(env, s.opts.Env...)
}

func (s *Stack) startServer(port int) (*server, error) {
	if port == 0 {
		var err error
		if port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(s.opts.ServerBinary)
	cmd.Env = append(append(os.Environ(), s.serverEnv()...), "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port),
		fmt.Sprintf("TXFENCE_INSTANCE_ID=local-%d", port))
	out := s.opts.ServerOutput
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start function server: %w", err)
	}
	return &server{url: fmt.Sprintf("http://127.0.0.1:%d", port), cmd: cmd}, nil
}

// schedule calls path on the live servers in turn, every period, as Cloud
// Scheduler calls the sweep functions.
func (s *Stack) schedule(ctx context.Context, path string, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	client := &http.Client{Timeout: 2 * every}
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
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.url+path, nil)
		resp, err := client.Do(req)
		if err != nil {
			s.opts.Log.Debug("scheduler call failed", slog.String("path", path), slog.Any("error", err))
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (srv *server) isDead() bool {
	srv.mu.Lock()
	defer srv.mu.Unlock()
	return srv.dead
}

// Kill SIGKILLs function server i, as a crashed instance.
func (s *Stack) Kill(i int) error {
	srv := s.servers[i]
	srv.mu.Lock()
	srv.dead = true
	srv.mu.Unlock()
	if err := srv.cmd.Process.Kill(); err != nil {
		return err
	}
	_ = srv.cmd.Wait()
	return nil
}

// Reorg replaces the last depth blocks of the simulated chain with a longer
// branch (depth + 1 new blocks); transactions of the dropped blocks return
// to the pool unless drop is set.
func (s *Stack) Reorg(depth int, drop bool) error {
	if s.Chain == nil {
		return errors.New("reorg: only the simulated chain can be reorganised")
	}
	ctx := context.Background()
	cl := s.Chain.Backend.Client()
	head, err := cl.HeaderByNumber(ctx, nil)
	if err != nil {
		return err
	}
	if head.Number.Int64() <= int64(depth) {
		return fmt.Errorf("reorg: the chain has only %d blocks", head.Number.Int64())
	}
	base, err := cl.HeaderByNumber(ctx, head.Number.Sub(head.Number, big.NewInt(int64(depth))))
	if err != nil {
		return err
	}
	if err := s.Chain.Fork(base.Hash()); err != nil {
		return err
	}
	if drop {
		s.Chain.Rollback()
	}
	for i := 0; i <= depth; i++ {
		s.Chain.Commit()
	}
	return nil
}

// Close stops everything and removes temporary data.
func (s *Stack) Close() error {
	if s.cancel != nil {
		s.cancel()
	}
	for _, srv := range s.servers {
		if srv.isDead() {
			continue
		}
		_ = srv.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = srv.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = srv.cmd.Process.Kill()
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
