// Package loadgen drives txfence's HTTP API with concurrent clients and
// measures create throughput and latency. The load tool (emulator/cmd/load)
// and the API benchmark (emulator/cmd/benchapi) use it.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config shapes one run.
type Config struct {
	URLs    []string // API base URLs; clients are spread over them round-robin
	ChainID uint64
	Signers []string // from addresses; one = a hot signer
	To      string
	// Data, 0x-hex, makes each create a call that carries it (to To, a
	// contract), without a gas limit: the create's simulation estimates
	// it. Empty: a plain transfer of 1 wei with a gas limit of 21,000.
	Data        string
	Concurrency int
	Requests    int           // total creates (0: run for Duration)
	Duration    time.Duration // used when Requests is 0
	Timeout     time.Duration // per request
	// Rate, when positive, offers requests at this many per second (open
	// loop) instead of each client sending its next as soon as it has an
	// answer; latency then counts from when a request was due, so a server
	// that falls behind shows it (no coordinated omission). Concurrency
	// bounds the requests in flight.
	Rate float64
	// Conns, when set, keeps the connections to the servers for the runs
	// that share it (a warm-up's for the run it warms); nil: the run's own,
	// closed when it ends.
	Conns *Conns
}

// Conns is kept-alive connections to servers, shared by runs; Close closes
// them once no run uses it.
type Conns struct {
	mu    sync.Mutex
	pools map[string]*connPool // by host:port
}

// NewConns returns an empty set of connections for runs to share.
func NewConns() *Conns { return &Conns{pools: map[string]*connPool{}} }

func (cs *Conns) pool(addr string) *connPool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	p, ok := cs.pools[addr]
	if !ok {
		p = &connPool{addr: addr}
		cs.pools[addr] = p
	}
	return p
}

// Close closes the idle connections.
func (cs *Conns) Close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for _, p := range cs.pools {
		p.close()
	}
}

// Result is what a run measured.
type Result struct {
	Requests  int
	Errors    int
	Statuses  map[int]int
	Elapsed   time.Duration
	Latencies []time.Duration // sorted, successful creates only
}

// PerSecond is successful creates per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(len(r.Latencies)) / r.Elapsed.Seconds()
}

// Quantile returns the q-quantile (0..1) of successful latencies.
func (r Result) Quantile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(q * float64(len(r.Latencies)-1))
	return r.Latencies[i]
}

func (r Result) String() string {
	return fmt.Sprintf("%8.0f creates/s  p50 %7s  p95 %7s  p99 %7s  (%d ok, %d errors)",
		r.PerSecond(), round(r.Quantile(0.50)), round(r.Quantile(0.95)), round(r.Quantile(0.99)), len(r.Latencies), r.Errors)
}

func round(d time.Duration) time.Duration {
	switch {
	case d > 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d > time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// Run performs the load and returns what it measured. Every request is a
// plain transfer with an explicit gas limit, or a call with cfg.Data, and
// has no request id.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if len(cfg.URLs) == 0 || len(cfg.Signers) == 0 || cfg.Concurrency < 1 {
		return Result{}, fmt.Errorf("loadgen: URLs, signers and a positive concurrency are required")
	}
	if cfg.Requests == 0 && cfg.Duration == 0 {
		return Result{}, fmt.Errorf("loadgen: give a request count or a duration")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.To == "" {
		cfg.To = "0x000000000000000000000000000000000000dEaD"
	}
	pools, paths := make([]*connPool, len(cfg.URLs)), make([]string, len(cfg.URLs))
	conns := cfg.Conns
	if conns == nil {
		conns = NewConns()
		defer conns.Close()
	}
	for i, u := range cfg.URLs {
		parsed, err := url.Parse(u)
		if err != nil || parsed.Scheme != "http" || parsed.Host == "" {
			return Result{}, fmt.Errorf("loadgen: %q is not an http:// URL", u)
		}
		pools[i], paths[i] = conns.pool(parsed.Host), strings.TrimSuffix(parsed.Path, "/")+"/v1/transactions"
	}
	bodies := make([][]byte, len(cfg.Signers))
	for i, s := range cfg.Signers {
		body := map[string]any{"chainId": cfg.ChainID, "from": s, "to": cfg.To, "value": "1", "gasLimit": 21000}
		if cfg.Data != "" {
			body = map[string]any{"chainId": cfg.ChainID, "from": s, "to": cfg.To, "data": cfg.Data}
		}
		b, _ := json.Marshal(body)
		bodies[i] = b
	}
	var (
		mu       sync.Mutex
		res      = Result{Statuses: map[int]int{}}
		deadline = time.Now().Add(cfg.Duration)
		wg       sync.WaitGroup
	)
	start := time.Now()
	// A job is a request's index and the time it was due. Closed loop, a
	// client takes the next index itself; open loop, a pacer hands out
	// each when it is due.
	type job struct {
		i   int
		due time.Time
	}
	var next atomic.Int64
	var jobs chan job
	if cfg.Rate > 0 {
		jobs = make(chan job)
		go func() {
			defer close(jobs)
			for i := 0; ctx.Err() == nil; i++ {
				if cfg.Requests > 0 && i >= cfg.Requests {
					return
				}
				due := start.Add(time.Duration(float64(i) / cfg.Rate * float64(time.Second)))
				time.Sleep(time.Until(due))
				if cfg.Requests == 0 && due.After(deadline) {
					return
				}
				select {
				case jobs <- job{i, due}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	take := func() (job, bool) {
		if jobs != nil {
			j, ok := <-jobs
			return j, ok
		}
		i := int(next.Add(1) - 1)
		now := time.Now()
		if ctx.Err() != nil || cfg.Requests > 0 && i >= cfg.Requests || cfg.Requests == 0 && now.After(deadline) {
			return job{}, false
		}
		return job{i, now}, true
	}
	for w := 0; w < cfg.Concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			statuses := map[int]int{}
			errs := 0
			for {
				j, ok := take()
				if !ok {
					break
				}
				u := j.i % len(cfg.URLs)
				c := pools[u].get()
				status, err := c.post(cfg.Timeout, paths[u], bodies[j.i%len(bodies)])
				pools[u].put(c)
				d := time.Since(j.due)
				statuses[status]++
				if err != nil || status != http.StatusAccepted {
					errs++
					continue
				}
				lat = append(lat, d)
			}
			mu.Lock()
			res.Latencies = append(res.Latencies, lat...)
			res.Errors += errs
			for k, v := range statuses {
				res.Statuses[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Requests = len(res.Latencies) + res.Errors
	sort.Slice(res.Latencies, func(i, j int) bool { return res.Latencies[i] < res.Latencies[j] })
	return res, nil
}

// connPool is the kept-alive connections to one server, shared by the
// clients as an HTTP client's or a load balancer's are: a request takes an
// idle one or dials, and gives it back when answered, so a run opens about
// as many as it has requests in flight at once per server. With a
// connection of its own per client and server, the latency scenario's
// 1,024 clients opened about 2,100 in its first 0.6 s and closed them as
// each client ended, both while requests were in flight.
type connPool struct {
	addr string // host:port
	mu   sync.Mutex
	idle []*clientConn
}

func (p *connPool) get() *clientConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		return c
	}
	return &clientConn{addr: p.addr}
}

func (p *connPool) put(c *clientConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.idle = append(p.idle, c)
}

// close closes the idle connections; called once no request is in flight.
func (p *connPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		c.close()
	}
	p.idle = nil
}

// clientConn is one kept-alive HTTP/1.1 connection of a client: a lean
// client that writes each request whole and reads the status line, the
// headers it needs and the body, so that the load generator, which shares
// the machine with what it measures, spends little of it (net/http's client
// costs several times as much CPU a request).
// Any error closes the connection; the next request dials again.
type clientConn struct {
	addr string // host:port
	c    net.Conn
	r    *bufio.Reader
	req  []byte
}

func (c *clientConn) close() {
	if c != nil && c.c != nil {
		_ = c.c.Close()
		c.c = nil
	}
}

// post sends a JSON body to path and returns the answer's status.
func (c *clientConn) post(timeout time.Duration, path string, body []byte) (int, error) {
	if c.c == nil {
		conn, err := net.DialTimeout("tcp", c.addr, timeout)
		if err != nil {
			return 0, err
		}
		c.c, c.r = conn, bufio.NewReaderSize(conn, 16*1024)
	}
	_ = c.c.SetDeadline(time.Now().Add(timeout))
	c.req = append(c.req[:0], "POST "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.addr...)
	c.req = append(c.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	c.req = strconv.AppendInt(c.req, int64(len(body)), 10)
	c.req = append(c.req, "\r\n\r\n"...)
	c.req = append(c.req, body...)
	if _, err := c.c.Write(c.req); err != nil {
		c.close()
		return 0, err
	}
	status, err := c.readResponse()
	if err != nil {
		c.close()
	}
	return status, err
}

// readResponse reads one response and discards its body.
func (c *clientConn) readResponse() (int, error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, fmt.Errorf("loadgen: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, fmt.Errorf("loadgen: bad status line %q", line)
	}
	length, chunked, closing := -1, false, false
	for {
		line, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h := bytes.TrimRight(line, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, fmt.Errorf("loadgen: bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		for {
			line, err := c.r.ReadSlice('\n')
			if err != nil {
				return 0, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(line, []byte(";"), 2)[0])), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("loadgen: bad chunk size %q", line)
			}
			if _, err := c.r.Discard(int(size) + 2); err != nil {
				return 0, err
			}
			if size == 0 {
				break
			}
		}
	case length >= 0:
		if _, err := c.r.Discard(length); err != nil {
			return 0, err
		}
	default:
		return 0, errors.New("loadgen: an answer with no length")
	}
	if closing {
		c.close()
	}
	return status, nil
}
