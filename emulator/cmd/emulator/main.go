// Command emulator runs the whole txfence stack on this machine, as
// deployed: `make dev`. It prints the console and API URLs, the RPC URL,
// PUBSUB_EMULATOR_HOST, the development signers, an API key and
// ready-to-paste curls, and shuts everything down (removing temporary data)
// on Ctrl-C.
//
// Development mode (a call without a credential is the principal "dev") is
// on unless -auth (or TXFENCE_AUTH) says otherwise: -auth apikey runs the
// API as deployed, API keys only.
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/txfence/txfence/emulator/stack"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/redact"
	"github.com/txfence/txfence/shared/txm"
)

func main() {
	serverBin := flag.String("server", "bin/server", "the built functions/server binary")
	port := flag.Int("port", 8080, "port of the (first) function server; the API is at /Api")
	adminPort := flag.Int("admin-port", 8099, "port of the emulator's chain admin endpoint (POST /reorg?depth=N[&drop=1], POST /hold, GET /hold, POST /release)")
	authFlag := flag.String("auth", authDefault(os.Getenv),
		"the servers' TXFENCE_AUTH: dev,apikey (development mode), or apikey to run as deployed (API keys only); must include apikey")
	servers := flag.Int("servers", 1, "function-server processes")
	signers := flag.Int("signers", 3, "development signers, funded on the simulated chain")
	blockTime := flag.Duration("block-time", time.Second, "simulated chain block interval")
	confirmations := flag.Uint64("confirmations", 3, "confirmations required")
	rpcURL := flag.String("rpc", os.Getenv("RPC_URL"), "use this chain instead of the simulated one")
	verbose := flag.Bool("v", false, "show the function servers' logs")
	flag.Parse()

	auth, err := checkAuth(*authFlag, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "emulator:", err)
		os.Exit(2)
	}
	log := logging.New(os.Stderr, "info", "")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	opts := stack.Options{
		ServerBinary: *serverBin, Servers: *servers, Signers: *signers, BlockTime: *blockTime,
		Confirmations: *confirmations, FirstPort: *port, DatabaseURL: os.Getenv("DATABASE_URL"),
		PubSubHost: os.Getenv("PUBSUB_EMULATOR_HOST"), RPCURL: *rpcURL, Auth: auth, Log: log,
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

	rate, burst := callerRate(os.Getenv)
	b := banner{Ready: time.Since(start), APIURL: s.APIURL, ChainID: 1337, RPCURL: s.RPCURL, PubSubHost: s.PubSubHost,
		DatabaseURL: s.DatabaseURL, Simulated: simulated, AdminPort: *adminPort, Key: key, Auth: auth,
		Confirmations: *confirmations, Rate: rate, Burst: burst}
	for _, a := range s.Signers {
		b.Signers = append(b.Signers, txm.CanonicalAddress(a))
	}
	printBanner(os.Stdout, b)
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("\nshutting down ...")
}

// authDefault is -auth's default: the caller's TXFENCE_AUTH, which the
// servers would otherwise never see (the stack sets theirs), else the
// stack's development mode.
func authDefault(getenv func(string) string) string {
	if v := getenv(config.EnvAuth); v != "" {
		return v
	}
	return stack.DefaultAuth
}

// checkAuth validates the servers' TXFENCE_AUTH before anything starts (a
// server that refuses its configuration would only time out): known methods,
// apikey among them (the banner's key), and oidc only with its audience.
func checkAuth(value string, getenv func(string) string) (string, error) {
	var methods []string
	for _, m := range strings.Split(value, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if !slices.Contains(config.AuthMethods, m) {
			return "", fmt.Errorf("-auth %q: %q is not one of %s", value, m, strings.Join(config.AuthMethods, ", "))
		}
		methods = append(methods, m)
	}
	a := config.Auth{Methods: methods}
	if !a.Has("apikey") {
		return "", fmt.Errorf("-auth %q: include apikey, the method of the key the emulator prints (e.g. -auth apikey, or dev,apikey)", value)
	}
	if a.Has("oidc") && getenv(config.EnvOIDCAudience) == "" {
		return "", fmt.Errorf("-auth %q: oidc needs %s, the audience callers' ID tokens are minted for", value, config.EnvOIDCAudience)
	}
	return strings.Join(methods, ","), nil
}

// callerRate is every principal's rate per server unless its policy sets
// one: TXFENCE_RATE_PER_SECOND and TXFENCE_RATE_BURST, which the servers
// inherit, or the configuration's defaults.
func callerRate(getenv func(string) string) (float64, int) {
	a := config.Defaults().Auth
	rate, burst := a.RatePerSecond, a.RateBurst
	if v, err := strconv.ParseFloat(getenv(config.EnvRatePerSecond), 64); err == nil && v > 0 {
		rate = v
	}
	if v, err := strconv.Atoi(getenv(config.EnvRateBurst)); err == nil && v > 0 {
		burst = v
	}
	return rate, burst
}

// serveAdmin is the chain admin endpoint of the simulated chain:
//
//	POST /reorg?depth=N[&drop=1]  reorganise the last N blocks (and end a hold)
//	POST /hold                    stop the chain after the next block that mines a development signer's transaction
//	GET  /hold                    the hold's state (JSON)
//	POST /release                 end a hold: blocks come again
func serveAdmin(s *stack.Stack, port int, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hold", func(w http.ResponseWriter, r *http.Request) {
		if err := s.HoldChain(); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		log.Info("hold armed")
		fmt.Fprintln(w, "the chain stops after the next block that mines a development signer's transaction; "+
			"POST /reorg?depth=1 then takes that block away, POST /release lets blocks come again")
	})
	mux.HandleFunc("GET /hold", func(w http.ResponseWriter, r *http.Request) {
		h := s.ChainHoldState()
		v := holdView{Armed: h.Armed, Held: h.Held, Skipped: h.Skipped}
		if h.Held {
			v.Block, v.Tx = h.Block, h.Tx.Hex()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
	mux.HandleFunc("POST /release", func(w http.ResponseWriter, r *http.Request) {
		s.ReleaseChain()
		log.Info("hold released")
		fmt.Fprintln(w, "released: blocks come again")
	})
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

// holdView is GET /hold's answer.
type holdView struct {
	Armed   bool   `json:"armed"`
	Held    bool   `json:"held"`
	Block   uint64 `json:"block,omitempty"`
	Tx      string `json:"tx,omitempty"`
	Skipped int    `json:"skipped"` // blocks not mined since the hold
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
	// Auth is the servers' TXFENCE_AUTH (stack.DefaultAuth when empty).
	Auth          string
	Confirmations uint64
	// Rate and Burst are every principal's rate per server unless its
	// policy sets one.
	Rate  float64
	Burst int
}

// printBanner writes the URLs, the signers, the credential, the curls to
// try (each with the credential) and, on the simulated chain, the reorg
// walk-through.
func printBanner(w io.Writer, b banner) {
	if b.Auth == "" {
		b.Auth = stack.DefaultAuth
	}
	if b.Confirmations == 0 {
		b.Confirmations = 3
	}
	if b.Rate == 0 {
		b.Rate, b.Burst = callerRate(func(string) string { return "" })
	}
	adminLine := ""
	funded := "(funded at genesis; DEVELOPMENT ONLY keys)"
	if b.Simulated {
		adminLine = fmt.Sprintf("  admin                 http://127.0.0.1:%d/reorg?depth=2   (POST; &drop=1 drops the transactions; /hold: below)\n", b.AdminPort)
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
	dev := config.Auth{Methods: strings.Split(b.Auth, ",")}.Has("dev")
	if dev {
		fmt.Fprintf(w, `
DEVELOPMENT MODE (TXFENCE_AUTH=%s): a call without a credential acts
as the all-powerful principal "dev". Deployed services refuse this mode;
make dev ARGS="-auth apikey" runs without it, as deployed.
Callers authenticate with a bearer token; this API key (principal
local-admin: sender, reader, admin on every signer) is shown only now:

  export TXFENCE_KEY=%s

The console above works without it here (as "dev"); paste the key into its
"Bearer token" field to act as local-admin, as a deployed console requires.
`, b.Auth, b.Key)
	} else {
		fmt.Fprintf(w, `
AUTHENTICATION AS DEPLOYED (TXFENCE_AUTH=%s): every call needs a bearer
token. This API key (principal local-admin: sender, reader, admin on every
signer) is shown only now:

  export TXFENCE_KEY=%s

Paste it into the console's "Bearer token" field too.
`, b.Auth, b.Key)
	}
	who := "Every caller, local-admin included,"
	if dev {
		who = `Every caller, "dev" and local-admin included,`
	}
	fmt.Fprintf(w, `
%s is rate limited per server as deployed:
%s calls/s, bursts of %d (TXFENCE_RATE_PER_SECOND and TXFENCE_RATE_BURST, or the
policy's ratePerSecond and burst); over it the answer is 429 with Retry-After.
`, who, strconv.FormatFloat(b.Rate, 'f', -1, 64), b.Burst)
	auth := `-H "Authorization: Bearer $TXFENCE_KEY"`
	fmt.Fprintf(w, `
Send a transaction:

  curl -s -X POST %s/v1/transactions %s \
    -H 'Content-Type: application/json' -d '%s'

then follow it:

  curl -s %s %s/v1/transactions/<id>
  curl -s %s '%s/v1/completions?after=0&wait=30s'

Send 1,000 over every signer with the Go client and follow the feed until
all are final (it reads $TXFENCE_KEY; examples/README.md):

  go run ./examples/go/sendmany -api %s -n 1000

and the same with the TypeScript client (it reads $TXFENCE_KEY; make
installs the pinned npm packages into .tools/tsclient first):

  make example-ts URL=%s N=1000
`, b.APIURL, auth, body, auth, b.APIURL, auth, b.APIURL, b.APIURL, b.APIURL)
	if b.Simulated {
		fmt.Fprintf(w, `
Watch a reorg: hold the chain after the next block that mines a transaction
of a development signer, send one (the curl above), follow it until it is
MINED (1 confirmation of %d: it stays there while the chain is held), then
take its block away:

  curl -s -X POST http://127.0.0.1:%d/hold
  curl -s -X POST 'http://127.0.0.1:%d/reorg?depth=1'

It goes back to TRACKING, is mined again and confirms, with "reorgCount":1;
its history shows each move:

  curl -s %s '%s/v1/transactions/<id>?include=history'

(GET /hold says where the chain is held; POST /release lets blocks come
without a reorg.)
`, b.Confirmations, b.AdminPort, b.AdminPort, auth, b.APIURL)
	}
	fmt.Fprintf(w, `
More keys and policies (docs/policies.md): TXFENCE_DATABASE_URL='%s' go run ./functions/admin.
On Google Cloud a caller sends a Google ID token instead (a person by
impersonating a service account, with the email the token must carry):
  -H "Authorization: Bearer $(gcloud auth print-identity-token --impersonate-service-account=<SA> --audiences=<TXFENCE_OIDC_AUDIENCE> --include-email)"

`, b.DatabaseURL)
}
