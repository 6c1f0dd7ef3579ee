// Package pgtest gives tests (and the local emulator) a real PostgreSQL:
// an ephemeral server started from the system's PostgreSQL 15 binaries in a
// temporary directory, a server named by TEST_DATABASE_URL, or a
// testcontainers-go container when TXFENCE_TEST_CONTAINERS=1. Each test gets
// a fresh database cloned from a migrated template.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir is where the PostgreSQL server binaries are looked for first.
var BinDir = "/usr/lib/postgresql/15/bin"

// Options shape an ephemeral server.
type Options struct {
	// Durable keeps fsync, synchronous_commit and full_page_writes on, as in
	// production; off by default for speed in tests.
	Durable bool
	// TCP also listens on 127.0.0.1 at a free port (other machines' clients,
	// tools that cannot use a unix socket).
	TCP bool
	// MaxConnections is max_connections (default 300).
	MaxConnections int
}

// Server is a running ephemeral PostgreSQL server.
type Server struct {
	dir  string
	sock string
	port int
	tcp  bool
	cmd  *exec.Cmd
	done chan struct{}
}

// Start initialises a data directory in a new temporary directory and starts
// postgres on a unix socket there. When the process runs as root the server
// runs as the "postgres" user, because initdb refuses root. The server is
// killed if this process dies (parent-death signal); Stop removes its data.
func Start(ctx context.Context, opts Options) (*Server, error) {
	initdb, err := findBinary("initdb")
	if err != nil {
		return nil, err
	}
	postgres, err := findBinary("postgres")
	if err != nil {
		return nil, err
	}
	cred, uid, gid, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "txfence-pg-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: temp dir: %w", err)
	}
	fail := func(err error) (*Server, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return fail(fmt.Errorf("pgtest: chown %s to the postgres user: %w", dir, err))
		}
	}
	data := filepath.Join(dir, "data")
	init := exec.CommandContext(ctx, initdb, "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	init.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := init.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgtest: initdb: %w\n%s", err, out))
	}

	s := &Server{dir: dir, sock: dir, port: 5432, tcp: opts.TCP, done: make(chan struct{})}
	listen := ""
	if opts.TCP {
		if s.port, err = freePort(); err != nil {
			return fail(err)
		}
		listen = "127.0.0.1"
	}
	maxConns := opts.MaxConnections
	if maxConns == 0 {
		maxConns = 300
	}
	args := []string{"-D", data, "-k", dir, "-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=" + listen,
		"-c", "max_connections=" + strconv.Itoa(maxConns),
		"-c", "shared_buffers=128MB",
		"-c", "log_min_messages=warning",
	}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	logFile, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return fail(fmt.Errorf("pgtest: log file: %w", err))
	}
	defer logFile.Close()
	s.cmd = exec.Command(postgres, args...)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		return fail(fmt.Errorf("pgtest: start postgres: %w", err))
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		logText, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		_ = s.Stop()
		return nil, fmt.Errorf("pgtest: postgres did not start: %w\n%s", err, logText)
	}
	return s, nil
}

// URL returns a connection string for database name as the superuser.
func (s *Server) URL(name string) string {
	if s.tcp {
		return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, url.PathEscape(name))
	}
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", s.sock, s.port, name)
}

// Stop shuts the server down (fast shutdown, then kill) and removes its data.
func (s *Server) Stop() error {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	}
	return os.RemoveAll(s.dir)
}

func (s *Server) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, s.URL("postgres"))
		cancel()
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.done:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s: %w", limit, err)
		}
	}
}

func findBinary(name string) (string, error) {
	p := filepath.Join(BinDir, name)
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("pgtest: %s not found in %s or on PATH; install the PostgreSQL 15 server (apt-get install postgresql-15) or set TEST_DATABASE_URL", name, BinDir)
}

// serverCredential returns the credential to run the server with: nil for a
// non-root process, the postgres user's for root.
func serverCredential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, 0, 0, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, fmt.Errorf("pgtest: running as root needs a postgres user to run the server as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, uid, gid, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
