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
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// BinDir is where the PostgreSQL server binaries are looked for first.
var BinDir = "/usr/lib/postgresql/15/bin"

// Options shape an ephemeral server.
type Options struct {
	// Durable keeps fsync, synchronous_commit and full_page_writes on, as in
	// production, and starts with the WAL segments made ahead that a
	// primary which has run a while has (see primeWAL); off by default for
	// speed in tests.
	Durable bool
	// TCP also listens on 127.0.0.1 at a free port (other machines' clients,
	// tools that cannot use a unix socket).
	TCP bool
	// MaxConnections is max_connections (default 300).
	MaxConnections int
	// Preload is shared_preload_libraries (pg_stat_statements, say, for a
	// benchmark that reports statement times).
	Preload []string
}

// Server is a running ephemeral PostgreSQL server.
type Server struct {
	dir      string
	sock     string
	port     int
	tcp      bool
	postgres string   // the server binary
	args     []string // its arguments, the same on every start
	cred     *syscall.Credential

	mu   sync.Mutex // guards cmd and done across Restart and Stop
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
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

	s := &Server{dir: dir, sock: dir, port: 5432, tcp: opts.TCP, postgres: postgres, cred: cred}
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
	if len(opts.Preload) > 0 {
		args = append(args, "-c", "shared_preload_libraries="+strings.Join(opts.Preload, ","), "-c", "pg_stat_statements.track=all")
	}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	s.args = args
	if err := s.start(); err != nil {
		return fail(err)
	}
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		logText, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
		_ = s.Stop()
		return nil, fmt.Errorf("pgtest: postgres did not start: %w\n%s", err, logText)
	}
	if opts.Durable {
		if err := s.primeWAL(ctx); err != nil {
			_ = s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// primeWAL makes max_wal_size of WAL segments ahead, as a primary under a
// steady load has them: each checkpoint renames the segments it no longer
// needs to future names, so that filling one moves on to a file that
// exists. A new cluster has none, and each segment it fills makes the next
// one, 16 MB written with zeros and synced, while every commit waits: a
// benchmark's tail latency would be the new cluster's, not txfence's.
// Under a steady
// load a checkpoint recycles segments up to max_wal_size past its start (or
// about twice the WAL between checkpoints, if less), so the next checkpoint,
// which starts once about half of max_wal_size was written, runs with the
// rest still ahead. Switching segments (each after a little WAL, which a
// switch needs) up to max_wal_size and a checkpoint leave that many ahead;
// it takes about two seconds here.
func (s *Server) primeWAL(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: prime WAL: %w", err)
	}
	defer conn.Close(ctx)
	segments, err := maxWALSegments(ctx, conn)
	if err != nil {
		return fmt.Errorf("pgtest: prime WAL: %w", err)
	}
	var maxMB int64 // max_wal_size is in MB
	if err := conn.QueryRow(ctx, `SELECT setting::bigint FROM pg_settings WHERE name = 'max_wal_size'`).Scan(&maxMB); err != nil {
		return fmt.Errorf("pgtest: prime WAL: %w", err)
	}
	// Twice max_wal_size while priming, so that no checkpoint starts half-way
	// (one recycles what it can at once here, nothing being dirty, and the
	// segments made after it are then that many fewer).
	steps := []string{fmt.Sprintf(`ALTER SYSTEM SET max_wal_size = '%dMB'`, 2*maxMB), `SELECT pg_reload_conf()`}
	for range segments {
		steps = append(steps, `SELECT pg_logical_emit_message(false, 'pgtest', ''), pg_switch_wal()`)
	}
	steps = append(steps, `CHECKPOINT`, `ALTER SYSTEM RESET max_wal_size`, `SELECT pg_reload_conf()`)
	for _, q := range steps {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("pgtest: prime WAL: %w", err)
		}
	}
	return nil
}

// maxWALSegments is max_wal_size in WAL segments.
func maxWALSegments(ctx context.Context, conn *pgx.Conn) (int, error) {
	var n int
	// max_wal_size is in MB, wal_segment_size in bytes.
	err := conn.QueryRow(ctx, `
SELECT (SELECT setting::bigint FROM pg_settings WHERE name = 'max_wal_size') * 1048576
     / (SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')`).Scan(&n)
	return n, err
}

// start runs postgres on the data directory, appending to its log.
func (s *Server) start() error {
	logFile, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: log file: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(s.postgres, s.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// running returns the current process and its exit channel.
func (s *Server) running() (*exec.Cmd, chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd, s.done
}

// shutdown stops the running server: a fast shutdown (SIGINT: sessions are
// cut, open transactions rolled back, a checkpoint written), then, after
// 10s, SIGKILL to its process group.
func (s *Server) shutdown() {
	cmd, done := s.running()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Restart stops the server fast and starts it again on the same data
// directory, socket and port, keeping the data: what clients see of a
// database failover or a restart for maintenance. Every session is cut;
// pools reconnect once it answers again. It returns when the server
// accepts connections.
func (s *Server) Restart(ctx context.Context) error {
	s.shutdown()
	if err := s.start(); err != nil {
		return err
	}
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		return fmt.Errorf("pgtest: postgres did not restart: %w", err)
	}
	return nil
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
	s.shutdown()
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
		_, done := s.running()
		select {
		case <-done:
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
