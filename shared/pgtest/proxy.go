package pgtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Cut says where a Proxy cuts a connection at the next COMMIT.
type Cut int

const (
	// CutNone forwards everything.
	CutNone Cut = iota
	// CutBeforeCommit closes the connection instead of forwarding COMMIT:
	// the transaction is rolled back.
	CutBeforeCommit
	// CutAfterCommit forwards COMMIT and closes the connection before its
	// answer reaches the client: the transaction is committed and the client
	// cannot know it.
	CutAfterCommit
	// CutAfterCommitAndDown is CutAfterCommit, then the database is
	// unreachable through the proxy (every connection closed, new ones
	// refused) until Up.
	CutAfterCommitAndDown
	// CutWhileRunning forwards the commit and closes the client's side at
	// once, before the server has answered (it may still be waiting for a
	// lock), as a network partition would: the server, which sees its side
	// stay open, goes on with it and commits unless its session is ended,
	// the client cannot know, and the cancel request the client sends when
	// its connection breaks is lost too.
	CutWhileRunning
)

// Proxy is a TCP proxy in front of a test database that can cut a
// connection at a commit, as a network fault or a server crash would. A
// commit is a COMMIT sent with the simple query protocol (how pgx commits
// an explicit transaction), or the Sync that ends an extended-protocol call
// of a statement that commits by itself in its implicit transaction: one
// that calls a function named in Commits (by default txfence_allocate and
// txfence_allocate_plain).
type Proxy struct {
	// URL is the database URL through the proxy.
	URL string

	upstream string // the unix socket (or host:port) of the server
	network  string
	ln       net.Listener

	// Commits names the functions whose calls are commit points.
	Commits []string

	mu        sync.Mutex
	cut       Cut
	down      bool
	partition bool // a CutWhileRunning happened: cancel requests are lost
	conns     map[net.Conn]bool
	hit       chan struct{}
}

// NewProxy starts a proxy to the database of url (a pgtest URL). It closes
// when the test ends.
func NewProxy(t testing.TB, url string) *Proxy {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("pgtest proxy: %v", err)
	}
	p := &Proxy{hit: make(chan struct{}, 16), conns: map[net.Conn]bool{}, Commits: []string{"txfence_allocate(", "txfence_allocate_plain("}}
	if filepath.IsAbs(cfg.Host) {
		p.network, p.upstream = "unix", filepath.Join(cfg.Host, ".s.PGSQL."+strconv.Itoa(int(cfg.Port)))
	} else {
		p.network, p.upstream = "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	p.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgtest proxy: %v", err)
	}
	t.Cleanup(func() { _ = p.ln.Close() })
	addr := p.ln.Addr().(*net.TCPAddr)
	p.URL = fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", addr.Port, cfg.User, cfg.Database)
	go p.serve()
	return p
}

// CutNext arms the proxy to cut the next COMMIT it sees, once.
func (p *Proxy) CutNext(c Cut) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = c
}

// Up makes the database reachable again after Down or CutAfterCommitAndDown.
func (p *Proxy) Up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// Down makes the database unreachable through the proxy, as a primary
// that is down or cut off: every connection is closed and new ones are
// refused until Up.
func (p *Proxy) Down() { p.goDown() }

// goDown closes every connection and refuses new ones until Up.
func (p *Proxy) goDown() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// cancelRequestCode is the protocol code of a CancelRequest message.
const cancelRequestCode = 80877102

// commits reports whether query calls one of p.Commits.
func (p *Proxy) commits(query []byte) bool {
	for _, f := range p.Commits {
		if bytes.Contains(query, []byte(f)) {
			return true
		}
	}
	return false
}

// Hit is signalled each time a COMMIT was cut.
func (p *Proxy) Hit() <-chan struct{} { return p.hit }

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(c)
	}
}

func (p *Proxy) relay(client net.Conn) {
	p.mu.Lock()
	down := p.down
	if !down {
		p.conns[client] = true
	}
	p.mu.Unlock()
	if down {
		_ = client.Close()
		return
	}
	defer func() {
		p.mu.Lock()
		delete(p.conns, client)
		p.mu.Unlock()
	}()
	server, err := net.Dial(p.network, p.upstream)
	if err != nil {
		_ = client.Close()
		return
	}
	closeBoth := func() { _ = client.Close(); _ = server.Close() }
	var dropping atomic.Bool // set: what the server says is never delivered
	var told atomic.Bool     // set: the cut was signalled already
	serverDone := make(chan struct{})
	go func() {
		defer close(serverDone)
		defer closeBoth()
		buf := make([]byte, 32*1024)
		for {
			n, err := server.Read(buf)
			if n > 0 && told.Load() {
				if err != nil {
					return
				}
				continue // the client is gone; the server's side stays open until it closes it
			}
			if n > 0 && dropping.Load() {
				p.mu.Lock()
				andDown := p.cut == CutAfterCommitAndDown
				p.cut = CutNone
				p.mu.Unlock()
				if andDown {
					p.goDown()
				}
				p.hit <- struct{}{} // the server answered COMMIT: it committed
				return
			}
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	defer closeBoth()
	// The startup message has no type byte: its length, then its body.
	var head [4]byte
	if _, err := io.ReadFull(client, head[:]); err != nil {
		return
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	body := make([]byte, max(n-4, 0))
	if _, err := io.ReadFull(client, body); err != nil {
		return
	}
	p.mu.Lock()
	partition := p.partition
	p.mu.Unlock()
	if partition && n == 16 && binary.BigEndian.Uint32(body[:4]) == cancelRequestCode {
		return // lost in the partition
	}
	if _, err := server.Write(append(head[:], body...)); err != nil {
		return
	}
	// Then typed messages: a type byte, a length, a body. Prepared
	// statements are remembered by name, so that a Bind of one that calls
	// a committing function marks the next Sync as a commit.
	statements := map[string]bool{} // name → its query commits
	committing := false             // a committing call is bound, its Sync not sent
	for {
		var h [5]byte
		if _, err := io.ReadFull(client, h[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(h[1:]))
		body := make([]byte, max(n-4, 0))
		if _, err := io.ReadFull(client, body); err != nil {
			return
		}
		msg := append(h[:], body...)
		switch h[0] {
		case 'P': // Parse: statement name, query, ...
			if name, rest, ok := bytes.Cut(body, []byte{0}); ok {
				query, _, _ := bytes.Cut(rest, []byte{0})
				statements[string(name)] = p.commits(query)
			}
		case 'B': // Bind: portal name, statement name, ...
			if _, rest, ok := bytes.Cut(body, []byte{0}); ok {
				name, _, _ := bytes.Cut(rest, []byte{0})
				committing = committing || statements[string(name)]
			}
		}
		simpleCommit := h[0] == 'Q' && bytes.EqualFold(bytes.TrimRight(bytes.TrimSpace(bytes.TrimRight(body, "\x00")), ";"), []byte("commit"))
		callCommit := h[0] == 'S' && committing
		if h[0] == 'S' {
			committing = false
		}
		if simpleCommit || callCommit {
			p.mu.Lock()
			cut := p.cut
			if cut != CutAfterCommitAndDown {
				p.cut = CutNone
			}
			p.mu.Unlock()
			switch cut {
			case CutBeforeCommit:
				p.hit <- struct{}{}
				return // closeBoth: the server sees the client go and rolls back
			case CutWhileRunning:
				p.mu.Lock()
				p.partition = true
				p.mu.Unlock()
				dropping.Store(true)
				told.Store(true)
				if _, err := server.Write(msg); err != nil {
					return
				}
				p.hit <- struct{}{}
				_ = client.Close()
				<-serverDone // the server's side stays open until it closes it
				return
			case CutAfterCommit, CutAfterCommitAndDown:
				dropping.Store(true)
				if _, err := server.Write(msg); err != nil {
					return
				}
				// The server→client side closes both once the answer comes.
				<-serverDone
				return
			}
		}
		if _, err := server.Write(msg); err != nil {
			return
		}
	}
}
