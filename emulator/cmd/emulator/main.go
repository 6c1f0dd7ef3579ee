// Command emulator runs the whole txfence stack on this machine, as
// deployed: `make dev`. It prints the console and API URLs, the RPC URL,
// PUBSUB_EMULATOR_HOST, the development signers and a ready-to-paste curl,
// and shuts everything down (removing temporary data) on Ctrl-C.
//
// Swap a part for one you already run: DATABASE_URL for PostgreSQL,
// PUBSUB_EMULATOR_HOST for gcloud's Pub/Sub emulator, -rpc (or RPC_URL) for
// an external chain such as geth --dev.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

func main() {
	serverBin := flag.String("server", "bin/server", "the built functions/server binary")
	port := flag.Int("port", 8080, "port of the (first) function server; the API is at /Api")
	adminPort := flag.Int("admin-port", 8099, "port of the emulator's admin endpoint (POST /reorg?depth=N[&drop=1])")
	servers := flag.Int("servers", 1, "function-server processes")
	signers := flag.Int("signers", 3, "development signers, funded on the simulated chain")
	blockTime := flag.Duration("block-time", time.Second, "simulated chain block interval")
	confirmations := flag.Uint64("confirmations", 3, "confirmations required")
	rpcURL := flag.String("rpc", os.Getenv("RPC_URL"), "use this chain instead of the simulated one")
	verbose := flag.Bool("v", false, "show the function servers' logs")
	flag.Parse()

	log := logging.New(os.Stderr, "info", "")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	opts := stack.Options{
		ServerBinary: *serverBin, Servers: *servers, Signers: *signers, BlockTime: *blockTime,
		Confirmations: *confirmations, FirstPort: *port, DatabaseURL: os.Getenv("DATABASE_URL"),
		PubSubHost: os.Getenv("PUBSUB_EMULATOR_HOST"), RPCURL: *rpcURL, Log: log,
	}
	if *verbose {
		opts.ServerOutput = os.Stderr
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(1)
	}
	defer s.Close()
	simulated := *rpcURL == ""
	if simulated { // the reorg endpoint exists only on the simulated chain
		admin := serveAdmin(s, *adminPort, log)
		defer admin.Close()
	}
	key, err := s.DevAPIKey(ctx, "local-admin", txm.RoleSender, txm.RoleReader, txm.RoleAdmin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(1)
	}

	b := banner{Ready: time.Since(start), APIURL: s.APIURL, ChainID: 1337, RPCURL: s.RPCURL, PubSubHost: s.PubSubHost,
		DatabaseURL: s.DatabaseURL, Simulated: simulated, AdminPort: *adminPort, Key: key}
	for _, a := range s.Signers {
		b.Signers = append(b.Signers, txm.CanonicalAddress(a))
	}
	printBanner(os.Stdout, b)
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("\nshutting down ...")
}

// serveAdmin answers POST /reorg?depth=N[&drop=1] by reorganising the
// simulated chain.
func serveAdmin(s *stack.Stack, port int, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /reorg", func(w http.ResponseWriter, r *http.Request) {
		depth, err := strconv.Atoi(r.URL.Query().Get("depth"))
		if err != nil || depth < 1 {
			http.Error(w, "depth must be a positive integer", http.StatusBadRequest)
			return
		}
		if err := s.Reorg(depth, r.URL.Query().Get("drop") != ""); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		log.Info("reorg", slog.Int("depth", depth))
		fmt.Fprintf(w, "reorganised the last %d blocks\n", depth)
	})
	srv := &http.Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
			log.Warn("admin endpoint", slog.Any("error", err))
		}
	}()
	return srv
}

// banner is what the emulator tells once everything is up.
type banner struct {
	Ready       time.Duration
	APIURL      string // e.g. http://127.0.0.1:8080/Api
	ChainID     uint64
	RPCURL      string
	PubSubHost  string
	DatabaseURL string
	// Simulated is the emulator's own chain: its signers are funded at
	// genesis and it has the reorg endpoint. With -rpc neither holds.
	Simulated bool
	AdminPort int
	Signers   []string
	Key       string // the local-admin API key, shown once
}

// printBanner writes the URLs, the signers, the console and a curl to try.
func printBanner(w io.Writer, b banner) {
	adminLine := ""
	funded := "(funded at genesis; DEVELOPMENT ONLY keys)"
	if b.Simulated {
		adminLine = fmt.Sprintf("  admin                 http://127.0.0.1:%d/reorg?depth=2   (POST; &drop=1 drops the transactions)\n", b.AdminPort)
	} else {
		funded = "(NOT funded: send each of these gas money on that chain before using it; DEVELOPMENT ONLY keys)"
	}
	rpcURL := b.RPCURL
	if !b.Simulated {
		rpcURL = redact.URL(rpcURL) // a provider's URL may carry its key
	}
	from := ""
	if len(b.Signers) > 0 {
		from = b.Signers[0]
	}
	body, _ := json.Marshal(map[string]string{"from": from, "to": "0x000000000000000000000000000000000000dEaD", "value": "1000000000000000"})
	fmt.Fprintf(w, `
txfence is running (ready in %s). Ctrl-C stops everything and removes its data.

  console               %s/console/
  API                   %s
  RPC (chain %d)      %s
  PUBSUB_EMULATOR_HOST  %s
  database              %s
%s  development signers   %s
`, b.Ready.Round(100*time.Millisecond), b.APIURL, b.APIURL, b.ChainID, rpcURL, b.PubSubHost, b.DatabaseURL, adminLine, funded)
	for _, a := range b.Signers {
		fmt.Fprintf(w, "                        %s\n", a)
	}
	fmt.Fprintf(w, `
DEVELOPMENT MODE (TXFENCE_AUTH=dev,apikey): a call without a credential acts
as the all-powerful principal "dev". Deployed services refuse this mode.
Callers authenticate with a bearer token; this API key (principal
local-admin: sender, reader, admin on every signer) is shown only now:

  export TXFENCE_KEY=%s

The console above works without it here (as "dev"); paste the key into its
"Bearer token" field to act as local-admin, as a deployed console requires.

Send a transaction:

  curl -s -X POST %s/v1/transactions -H "Authorization: Bearer $TXFENCE_KEY" \
    -H 'Content-Type: application/json' -d '%s'

then follow it:

  curl -s -H "Authorization: Bearer $TXFENCE_KEY" %s/v1/transactions/<id>
  curl -s -H "Authorization: Bearer $TXFENCE_KEY" '%s/v1/completions?after=0&wait=30s'

More keys and policies: TXFENCE_DATABASE_URL='%s' go run ./functions/admin.
On Google Cloud a caller sends a Google ID token instead (a person by
impersonating a service account, with the email the token must carry):
  -H "Authorization: Bearer $(gcloud auth print-identity-token --impersonate-service-account=<SA> --audiences=<TXFENCE_OIDC_AUDIENCE> --include-email)"

`, b.Key, b.APIURL, body, b.APIURL, b.APIURL, b.DatabaseURL)
}
