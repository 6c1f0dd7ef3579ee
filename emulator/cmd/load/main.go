// Command load drives a running txfence API with concurrent create requests
// and prints creates/s with p50/p95/p99 latency. It sends only to the URLs
// it is given (use it against your own local stack).
//
//	go run ./emulator/cmd/load -url http://127.0.0.1:8080 -signers 0xabc... -c 64 -n 5000
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/txfence/txfence/emulator/loadgen"
)

func main() {
	urls := flag.String("url", "http://127.0.0.1:8080", "comma-separated API base URLs")
	signers := flag.String("signers", "", "comma-separated signer addresses (one = a hot signer)")
	chainID := flag.Uint64("chain", 1337, "chain id")
	conc := flag.Int("c", 32, "concurrent clients")
	n := flag.Int("n", 2000, "total creates (0: use -d)")
	d := flag.Duration("d", 0, "run for this long instead of -n")
	flag.Parse()
	if *signers == "" {
		fmt.Fprintln(os.Stderr, "load: -signers is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := loadgen.Run(ctx, loadgen.Config{
		URLs: strings.Split(*urls, ","), ChainID: *chainID, Signers: strings.Split(*signers, ","),
		Concurrency: *conc, Requests: *n, Duration: *d, Timeout: 30 * time.Second,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	fmt.Println(res)
	if len(res.Statuses) > 1 || res.Errors > 0 {
		fmt.Println("statuses:", res.Statuses)
	}
}
