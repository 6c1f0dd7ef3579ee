// Command benchcold measures the function server's cold start: the time
// from exec to its first served request, as Cloud Run would see it when it
// starts an instance for a waiting request. Each run starts a fresh API
// process against one PostgreSQL and a simulated chain and sends, from the
// moment of exec, the request a client would: a create (and separately
// notes when /healthz first answered). It prints each run and, last, the
// median: `bench-coldstart: first_request_ms=<median>`. Run it with
// `make bench-coldstart`.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/evm/evmtest"
	"github.com/txfence/txfence/shared/pgtest"
)

func main() {
	runs := flag.Int("runs", 9, "cold starts to measure")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *runs); err != nil {
		fmt.Fprintln(os.Stderr, "benchcold:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, runs int) error {
	server, cleanup, err := stack.BuildTempServer(ctx)
	if err != nil {
		return err
	}
	defer cleanup()
	dbURL, _, stopDB, err := stack.BenchDatabase(ctx, pgtest.Options{})
	if err != nil {
		return err
	}
	defer stopDB()
	chain, err := evmtest.New(nil)
	if err != nil {
		return err
	}
	defer chain.Close()
	signer := "0x0000000000000000000000000000000000c01d00"
	body := []byte(`{"chainId":1337,"from":"` + signer + `","to":"0x000000000000000000000000000000000000dEaD","value":"1","gasLimit":21000}`)

	var firsts []time.Duration
	for i := 0; i < runs; i++ {
		first, health, err := once(ctx, server, dbURL, chain.URL, signer, body)
		if err != nil {
			return fmt.Errorf("run %d: %w", i+1, err)
		}
		fmt.Printf("run %d: /healthz after %s, first create served after %s\n", i+1, ms(health), ms(first))
		firsts = append(firsts, first)
	}
	sort.Slice(firsts, func(a, b int) bool { return firsts[a] < firsts[b] })
	fmt.Printf("bench-coldstart: first_request_ms=%.0f\n", float64(firsts[len(firsts)/2].Microseconds())/1000)
	return nil
}

// once execs one API process and returns how long until it served a create
// (202) and until /healthz first answered.
func once(ctx context.Context, server, dbURL, rpcURL, signer string, body []byte) (first, health time.Duration, err error) {
	port, err := stack.FreePort()
	if err != nil {
		return 0, 0, err
	}
	cmd := exec.CommandContext(ctx, server)
	cmd.Env = append(os.Environ(),
		"FUNCTION_TARGET=Api", "HOST=127.0.0.1", fmt.Sprintf("PORT=%d", port),
		"TXFENCE_DATABASE_URL="+dbURL, "TXFENCE_CHAINS=1337="+rpcURL, "TXFENCE_SIGNERS="+signer,
		"TXFENCE_INSTANCE_ID=cold", "TXFENCE_LOG_LEVEL=error", "TXFENCE_AUTH=dev")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	healthDone := make(chan time.Duration, 1)
	go func() {
		for time.Since(start) < 30*time.Second {
			if resp, err := client.Get(base + "/healthz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusNoContent {
					healthDone <- time.Since(start)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
		healthDone <- -1
	}()
	for time.Since(start) < 30*time.Second {
		resp, err := client.Post(base+"/v1/transactions", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				first = time.Since(start)
				return first, <-healthDone, nil
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				return 0, 0, fmt.Errorf("create answered %d", resp.StatusCode)
			}
		}
		time.Sleep(time.Millisecond)
	}
	return 0, 0, fmt.Errorf("no create served within 30s")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d.Microseconds())/1000) }
