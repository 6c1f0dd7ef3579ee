package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/txfence/txfence/emulator/loadgen"
	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/evm/evmtest"
)

// The simulation comparison (scenario "sim"): creates that are simulated
// (an ERC-20 transfer, a call with data, which txfence simulates with
// eth_simulateV1 and estimates in one JSON-RPC batch per allocation batch
// before it allocates nonces) against plain transfers (no data, to an
// address without code: no call at all), from one hot signer through one API
// process. Both kinds go to the same process in slices, plain sim sim plain
// ..., so that each pair of slices sees the machine in about the same state
// (see ab.go). The chain is the simulated one, served over JSON-RPC from
// this process; a timing proxy in front of it measures each simulation
// request's round trip.

// simOptions are the flags of the simulation comparison.
type simOptions struct {
	slices int           // slices each kind is offered the load
	slice  time.Duration // how long a slice lasts
	delay  time.Duration // added to each simulation request: a node across a network
}

// simOutcome is what the simulation comparison measured.
type simOutcome struct {
	plain, sim   loadgen.Result
	cpuPlain     stack.CPUTimes
	cpuSim       stack.CPUTimes
	rates        []float64       // sim/plain creates/s of each pair of slices next to each other
	calls        []time.Duration // each simulation request's round trip, sorted
	simulated    int             // eth_simulateV1 calls in those requests (one per create)
	commitsPlain float64
	commitsSim   float64
}

// callQuantile is the q-quantile of the simulation requests' round trips.
func (o simOutcome) callQuantile(q float64) time.Duration {
	if len(o.calls) == 0 {
		return 0
	}
	return o.calls[int(q*float64(len(o.calls)-1))]
}

// rpcTimer is a reverse proxy in front of the chain's JSON-RPC that times,
// while it is on, each HTTP request that carries an eth_simulateV1 call (a
// JSON-RPC batch of simulations and estimates), from its arrival to the end
// of the node's answer. With a delay, it holds each such request that long
// first, as a network between txfence and a node would.
type rpcTimer struct {
	url   string
	delay time.Duration
	srv   *http.Server
	proxy *httputil.ReverseProxy

	mu        sync.Mutex
	on        bool
	calls     []time.Duration
	simulated int
}

var simMethod = []byte(`"eth_simulateV1"`)

func startRPCTimer(upstream string, delay time.Duration) (*rpcTimer, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &rpcTimer{url: "http://" + ln.Addr().String(), delay: delay, proxy: httputil.NewSingleHostReverseProxy(u)}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	return t, nil
}

func (t *rpcTimer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	n := bytes.Count(body, simMethod)
	start := time.Now()
	if n > 0 && t.delay > 0 {
		time.Sleep(t.delay)
	}
	t.proxy.ServeHTTP(w, r)
	d := time.Since(start)
	if n == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on {
		t.calls = append(t.calls, d)
		t.simulated += n
	}
}

// measure turns the timing on or off.
func (t *rpcTimer) measure(on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on = on
}

func (t *rpcTimer) close() { _ = t.srv.Close() }

// deployToken deploys the ERC-20 the simulated creates call, its supply
// held by holder, from the chain's funded deployer.
func (b *bench) deployToken(ctx context.Context, holder common.Address) (common.Address, error) {
	return b.chain.Deploy(ctx, b.deployer.Key, evmtest.ERC20(), "Bench", "BNC", holder, new(big.Int).Lsh(big.NewInt(1), 128))
}

// runSim runs the simulation comparison and prints its figures.
func runSim(ctx context.Context, b *bench, conc, gomaxprocs int, warm time.Duration, profile string, opts simOptions) (simOutcome, error) {
	var o simOutcome
	if err := b.clean(ctx); err != nil {
		return o, err
	}
	signer := b.signers[0]
	token, err := b.deployToken(ctx, common.HexToAddress(signer))
	if err != nil {
		return o, err
	}
	data, err := evmtest.ERC20().Pack("transfer", common.HexToAddress("0x00000000000000000000000000000000000a11ce"), big.NewInt(1))
	if err != nil {
		return o, err
	}
	timer, err := startRPCTimer(b.rpcURL, opts.delay)
	if err != nil {
		return o, err
	}
	defer timer.close()
	sc := scenario{mode: "batched", procs: 1, signers: 1}
	api, err := startAPI(ctx, sc, b.server, b.dbURL, timer.url, b.signers, gomaxprocs, nil, "sim", profile != "")
	defer api.stop()
	if err != nil {
		return o, err
	}
	conns := loadgen.NewConns()
	defer conns.Close()
	plain := loadgen.Config{URLs: api.urls, ChainID: 1337, Signers: []string{signer}, Concurrency: conc, Duration: opts.slice, Conns: conns}
	sim := plain
	sim.To, sim.Data = token.Hex(), hexutil.Encode(data)

	fmt.Printf("\nsimulation: a hot signer through 1 process, %d concurrent clients (closed loop): plain transfers (no data, no call) against ERC-20 transfers (simulated: eth_simulateV1 and eth_estimateGas, one JSON-RPC batch an allocation batch), in %d slices of %s each, plain sim sim plain ..., after %s of each not counted; %s added to each simulation request\n",
		conc, opts.slices, opts.slice, warm, opts.delay)
	// The process syncs the signer's nonce once, then runs at each load.
	if _, err := loadgen.Run(ctx, loadgen.Config{URLs: api.urls, ChainID: 1337, Signers: []string{signer}, Concurrency: 1, Requests: 1}); err != nil {
		return o, err
	}
	for _, cfg := range []loadgen.Config{plain, sim} {
		if warm > 0 {
			w := cfg
			w.Duration = warm
			r, err := loadgen.Run(ctx, w)
			if err != nil {
				return o, err
			}
			if r.Errors > 0 {
				return o, fmt.Errorf("sim warm-up: %d creates failed: %v", r.Errors, r.Statuses)
			}
		}
	}
	var prof chan error
	if api.pprof != "" {
		prof = make(chan error, 1)
	}
	pids := []int{api.procs[0].Process.Pid}
	var plainRates, simRates []float64
	for i := 0; i < opts.slices; i++ {
		order := []bool{false, true} // sim?
		if i%2 == 1 {
			order = []bool{true, false}
		}
		for _, simulated := range order {
			cfg, res, cpu, commits := plain, &o.plain, &o.cpuPlain, &o.commitsPlain
			if simulated {
				cfg, res, cpu, commits = sim, &o.sim, &o.cpuSim, &o.commitsSim
				if prof != nil && i == 0 {
					go func() { prof <- cpuProfile(ctx, api.pprof, profile+"/sim-hot-1.pprof") }()
				}
			}
			timer.measure(simulated)
			x := xids(ctx, b.pool)
			before := stack.SampleCPU(pids)
			r, err := loadgen.Run(ctx, cfg)
			timer.measure(false)
			if err != nil {
				return o, err
			}
			if r.Errors > 0 {
				return o, fmt.Errorf("sim: %d creates failed: %v", r.Errors, r.Statuses)
			}
			*cpu = cpu.Add(stack.SampleCPU(pids).Sub(before))
			*commits += xids(ctx, b.pool) - x
			res.Latencies = append(res.Latencies, r.Latencies...)
			res.Elapsed += r.Elapsed
			res.Requests += r.Requests
			if simulated {
				simRates = append(simRates, r.PerSecond())
			} else {
				plainRates = append(plainRates, r.PerSecond())
			}
		}
	}
	if prof != nil {
		if err := <-prof; err != nil {
			return o, err
		}
	}
	for i := range simRates {
		o.rates = append(o.rates, simRates[i]/plainRates[i])
	}
	for _, r := range []*loadgen.Result{&o.plain, &o.sim} {
		sort.Slice(r.Latencies, func(i, j int) bool { return r.Latencies[i] < r.Latencies[j] })
	}
	timer.mu.Lock()
	o.calls, o.simulated = append([]time.Duration(nil), timer.calls...), timer.simulated
	timer.mu.Unlock()
	sort.Slice(o.calls, func(i, j int) bool { return o.calls[i] < o.calls[j] })
	if len(o.calls) == 0 {
		return o, errors.New("sim: no simulation request reached the chain: were the creates simulated?")
	}
	if err := stack.CheckContiguous(ctx, b.pool); err != nil {
		return o, fmt.Errorf("sim: %w", err)
	}

	for _, k := range []struct {
		name    string
		res     loadgen.Result
		cpu     stack.CPUTimes
		commits float64
	}{{"plain", o.plain, o.cpuPlain, o.commitsPlain}, {"sim", o.sim, o.cpuSim, o.commitsSim}} {
		fmt.Printf("%-8s %-6d %-8s %s  %.1f creates/commit  %s\n", "hot", 1, k.name, k.res, float64(len(k.res.Latencies))/max(k.commits, 1),
			outcome{res: k.res, cpu: k.cpu}.cpuPer())
	}
	var inFlight time.Duration
	for _, d := range o.calls {
		inFlight += d
	}
	fmt.Printf("%-24s sim/plain: creates/s %.2f (pairs %s); simulation requests: %d, %.1f creates each, round trip p50 %s p99 %s mean %s, in flight %.0f%% of the simulated slices' time (the chain's own CPU counts as load's)\n", "",
		o.sim.PerSecond()/max(o.plain.PerSecond(), 1), spread(o.rates), len(o.calls), float64(o.simulated)/float64(len(o.calls)),
		round(o.callQuantile(0.5)), round(o.callQuantile(0.99)), round(inFlight/time.Duration(len(o.calls))),
		100*inFlight.Seconds()/o.sim.Elapsed.Seconds())
	return o, nil
}

// round is d rounded for printing.
func round(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
