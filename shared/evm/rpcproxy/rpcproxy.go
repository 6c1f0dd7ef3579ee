package rpcproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txfence/txfence/shared/redact"
)

// Fault is what a call is answered with instead of the node's answer. The
// fields combine: Delay comes first, then Drop, HTTPStatus, RPCError,
// Swallow and EmptyResult, the first of them set deciding the answer. The
// zero Fault lets the call through.
type Fault struct {
	// RPCError answers the call with this JSON-RPC error object.
	RPCError *RPCError
	// HTTPStatus answers the whole HTTP request, batch and all, with this
	// status (e.g. 502, 429) and a short text body.
	HTTPStatus int
	// Delay waits this long before answering or forwarding; on its own it
	// only delays the node's answer (to make a client time out).
	Delay time.Duration
	// Drop closes the connection of the whole HTTP request without answering.
	Drop bool
	// Swallow answers an eth_sendRawTransaction call with the hash of its
	// transaction, as a node that accepted it would, and forwards nothing:
	// a broadcast lost on its way to the network. A call whose params hold
	// no signed transaction is answered with an invalid-params error.
	Swallow bool
	// EmptyResult answers the call with "result": null.
	EmptyResult bool
}

// answers reports whether f answers the call itself, instead of letting it
// through to the node.
func (f *Fault) answers() bool {
	return f != nil && (f.Drop || f.HTTPStatus != 0 || f.RPCError != nil || f.Swallow || f.EmptyResult)
}

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// Call is one JSON-RPC call the proxy received; each element of a batch is a
// call of its own.
type Call struct {
	Method string
	Params json.RawMessage
	// Time is when the HTTP request carrying the call arrived.
	Time time.Time
	// Request numbers the HTTP request carrying the call, from 1 in order
	// of arrival: the calls of one batch share it.
	Request int
	// Faulted is whether a fault answered the call (including a Drop or
	// HTTPStatus fault of another call of the same batch), so that the node
	// never saw it. A fault that only delays does not count.
	Faulted bool
}

// rule is a Fail: fault for the next left calls, or all of them when left < 0.
type rule struct {
	left  int
	fault Fault
}

// Proxy is a JSON-RPC reverse proxy on 127.0.0.1 that forwards every
// request, whatever its path, to one upstream URL. It is safe for concurrent
// use.
type Proxy struct {
	// URL is where the proxy listens, http://127.0.0.1:<port>.
	URL string

	upstream string
	client   *http.Client
	srv      *http.Server
	cancel   context.CancelFunc
	served   chan struct{} // closed when srv.Serve has returned
	handlers sync.WaitGroup
	once     sync.Once

	mu      sync.Mutex
	gates   map[string]*sync.RWMutex // by method; see Hold
	closed  bool
	calls   []*Call
	reqs    int // HTTP requests with JSON-RPC calls received
	before  map[string]func(json.RawMessage) *Fault
	fail    map[string][]rule
	failAll *Fault
	lagBy   uint64 // see Lag
}

// New starts a proxy to upstream, an http(s) JSON-RPC endpoint. Close it
// when done.
func New(upstream string) (*Proxy, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("new rpc proxy: %w", redact.Error(err, upstream))
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new rpc proxy: upstream %s is not an http(s) URL", redact.URL(upstream))
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("new rpc proxy: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // never through $HTTP_PROXY
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		URL:      "http://" + l.Addr().String(),
		upstream: upstream,
		client:   &http.Client{Transport: transport},
		cancel:   cancel,
		served:   make(chan struct{}),
		before:   make(map[string]func(json.RawMessage) *Fault),
		gates:    make(map[string]*sync.RWMutex),
		fail:     make(map[string][]rule),
	}
	p.srv = &http.Server{
		Handler:           http.HandlerFunc(p.serve),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() {
		defer close(p.served)
		_ = p.srv.Serve(l) // returns http.ErrServerClosed on Close
	}()
	return p, nil
}

// Start is New for a test: it fails the test on error and closes the proxy
// in t.Cleanup.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	p, err := New(upstream)
	if err != nil {
		t.Fatalf("rpcproxy: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Close stops the proxy: requests in flight, delayed ones included, are
// cut off. It may be called more than once.
func (p *Proxy) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.cancel()
		_ = p.srv.Close()
		<-p.served
		p.handlers.Wait()
		p.client.CloseIdleConnections()
	})
}

// Calls returns the calls received so far, in order of arrival.
func (p *Proxy) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Call, len(p.calls))
	for i, c := range p.calls {
		out[i] = *c
		out[i].Params = slices.Clone(c.Params)
	}
	return out
}

// Count returns how many calls of method were received, faulted or not.
func (p *Proxy) Count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		if c.Method == method {
			n++
		}
	}
	return n
}

// Reset forgets the calls received so far; rules and hooks stay.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = nil
}

// Before runs fn with the params of every call of method before it is
// forwarded; when fn returns a non-nil Fault, the call gets the fault
// instead. fn is not run for calls a Fail or FailAll rule has claimed, may
// run concurrently, and may use the Proxy. A later Before replaces fn; a nil
// fn removes it. Heal leaves it in place.
func (p *Proxy) Before(method string, fn func(params json.RawMessage) *Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fn == nil {
		delete(p.before, method)
		return
	}
	p.before[method] = fn
}

// Fail makes the next n calls of method get f; n < 0 means every call until
// Heal. Rules for the same method queue up in the order they were added.
func (p *Proxy) Fail(method string, n int, f Fault) {
	if n == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fail[method] = append(p.fail[method], rule{left: n, fault: f})
}

// FailAll makes every call, of any method, get f until Heal: a whole-node
// outage. It takes precedence over Fail rules and Before hooks.
func (p *Proxy) FailAll(f Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAll = &f
}

// Heal removes every Fail and FailAll rule.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failAll = nil
	clear(p.fail)
}

// Hold makes requests that carry a call of method wait, and returns once
// those already past the proxy's door have been answered: from then until
// release is called, the node receives no call of method through the proxy.
// Use it to keep a node's input still while something is done to the node
// (the stack's reorg of its simulated chain empties the chain's pool for a
// moment). release may be called more than once; call it before Close.
func (p *Proxy) Hold(method string) (release func()) {
	g := p.gate(method)
	g.Lock()
	var once sync.Once
	return func() { once.Do(g.Unlock) }
}

// gate returns method's gate, creating it.
func (p *Proxy) gate(method string) *sync.RWMutex {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.gates[method]
	if g == nil {
		g = new(sync.RWMutex)
		p.gates[method] = g
	}
	return g
}

// pass waits at the gate of every method of reqs and returns the function
// that lets the gates go once the request has been answered.
func (p *Proxy) pass(reqs []request) (done func()) {
	methods := make([]string, 0, len(reqs))
	for _, r := range reqs {
		methods = append(methods, r.method)
	}
	slices.Sort(methods)
	methods = slices.Compact(methods)
	gates := make([]*sync.RWMutex, len(methods))
	for i, m := range methods {
		gates[i] = p.gate(m)
		gates[i].RLock()
	}
	return func() {
		for _, g := range gates {
			g.RUnlock()
		}
	}
}

// enter registers a request handler, unless the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.handlers.Add(1)
	return true
}

// resolve records reqs and decides the fault of each (nil: forward it).
func (p *Proxy) resolve(reqs []request) ([]*Call, []*Fault) {
	now := time.Now()
	calls := make([]*Call, len(reqs))
	faults := make([]*Fault, len(reqs))
	hooks := make([]func(json.RawMessage) *Fault, len(reqs))
	p.mu.Lock()
	p.reqs++
	for i, req := range reqs {
		calls[i] = &Call{Method: req.method, Params: slices.Clone(req.params), Time: now, Request: p.reqs}
		p.calls = append(p.calls, calls[i])
		switch f := p.takeRule(req.method); {
		case p.failAll != nil:
			all := *p.failAll
			faults[i] = &all
		case f != nil:
			faults[i] = f
		default:
			hooks[i] = p.before[req.method]
		}
	}
	p.mu.Unlock()
	for i, hook := range hooks {
		if hook != nil {
			faults[i] = hook(reqs[i].params)
		}
	}
	return calls, faults
}

// takeRule returns the fault of the first Fail rule for method, using it up
// once; nil when there is none or FailAll is on. p.mu must be held.
func (p *Proxy) takeRule(method string) *Fault {
	rules := p.fail[method]
	if p.failAll != nil || len(rules) == 0 {
		return nil
	}
	f := rules[0].fault
	if rules[0].left > 0 {
		rules[0].left--
		if rules[0].left == 0 {
			p.fail[method] = rules[1:]
		}
	}
	return &f
}

// markFaulted flags the calls for which faulted(i) holds.
func (p *Proxy) markFaulted(calls []*Call, faulted func(i int) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, c := range calls {
		if faulted(i) {
			c.Faulted = true
		}
	}
}
