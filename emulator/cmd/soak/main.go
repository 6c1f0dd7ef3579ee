// Command soak is txfence's fault soak (`make soak`): it starts the local
// stack in this process (function servers as processes, one simulated
// chain, PostgreSQL, Pub/Sub), makes creates on several signers while it
// injects faults in turn, heals them, waits for every transaction to settle
// and checks every row and the completions feed. Its last line is
//
//	soak: txs=N confirmed=N failed=N open=N violations=N faults=N
//
// and it exits 1 when a transaction is left open or an invariant broke,
// 2 when the soak could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/txfence/txfence/emulator/soak"
)

func main() {
	var cfg soak.Config
	flag.StringVar(&cfg.ServerBinary, "server", "bin/server", "the built functions/server binary")
	flag.IntVar(&cfg.Txs, "txs", 2000, "creates to make")
	flag.IntVar(&cfg.Signers, "signers", 4, "signers the creates are spread over")
	flag.IntVar(&cfg.Servers, "servers", 3, "function-server processes (at least 2)")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed for signers, values, odd creates and the faults' victims")
	flag.DurationVar(&cfg.Timeout, "timeout", 0, "how long, once the faults have healed, to wait for every transaction to settle (5m)")
	flag.DurationVar(&cfg.Window, "window", 0, "how long each fault lasts (8s)")
	flag.DurationVar(&cfg.Gap, "gap", 0, "calm after each fault (4s)")
	flag.DurationVar(&cfg.BlockTime, "block-time", 0, "simulated block interval (500ms)")
	flag.IntVar(&cfg.MaxFee1, "maxfee1", 0, "creates whose caller caps the fee at 1 wei (0: one in 250, at least 2; -1: none)")
	faults := flag.String("faults", "", "comma-separated faults to inject (all), or none: "+strings.Join(soak.FaultNames, ","))
	serverLog := flag.String("server-log", "", "append the function servers' logs to this file")
	flag.Parse()
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	cfg.Out = os.Stdout
	if *serverLog != "" {
		f, err := os.OpenFile(*serverLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
		defer f.Close()
		cfg.ServerOutput = f
	} else {
		cfg.ServerOutput = io.Discard
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if !res.OK() {
		os.Exit(1)
	}
}
