// Command sendmany sends many transactions over several signers through
// the Go client (github.com/txfence/txfence/client), follows the
// completion feed from a cursor taken before the first create, and prints
// a summary line when every transaction is final.
//
// Against make dev (development mode: no credential needed):
//
//	go run ./examples/go/sendmany -api http://127.0.0.1:8080/Api -n 1000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/txfence/txfence/examples/go/sendmany/sendmany"
)

func main() {
	var cfg sendmany.Config
	var signers string
	flag.StringVar(&cfg.API, "api", "http://127.0.0.1:8080/Api", "the API's root URL")
	flag.StringVar(&cfg.Key, "key", os.Getenv("TXFENCE_KEY"), "API key (default $TXFENCE_KEY; empty sends none, as development mode allows)")
	flag.StringVar(&signers, "signers", "", "comma-separated signer addresses (default: the configured signers, from GET /v1/signers)")
	flag.StringVar(&cfg.To, "to", "0x000000000000000000000000000000000000dEaD", "recipient of each transaction's 1 wei")
	flag.Uint64Var(&cfg.ChainID, "chain", 0, "chain id (0: the deployment's only chain)")
	flag.IntVar(&cfg.N, "n", 1000, "transactions to send")
	flag.IntVar(&cfg.Concurrency, "concurrency", 16, "creates in flight at once")
	flag.DurationVar(&cfg.Progress, "progress", 0, "interval between progress lines (default 2s)")
	flag.Parse()
	for _, s := range strings.Split(signers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.Signers = append(cfg.Signers, s)
		}
	}
	if cfg.N <= 0 || cfg.Concurrency <= 0 {
		fmt.Fprintln(os.Stderr, "sendmany: -n and -concurrency must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sendmany.Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		stop()
		os.Exit(1)
	}
}
