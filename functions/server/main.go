// Command server serves txfence's functions with the Functions Framework.
// In deployment each Cloud Run service sets FUNCTION_TARGET to the one
// function it runs (served at /); without it every function is served at
// /<Name> (the emulator runs it that way), and the API's routes at /Api/...
package main

import (
	"context"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	"github.com/txfence/txfence/functions/api"
	_ "github.com/txfence/txfence/functions/finality"
	"github.com/txfence/txfence/functions/internal/deps"
	_ "github.com/txfence/txfence/functions/outbox"
	_ "github.com/txfence/txfence/functions/receipt"
	_ "github.com/txfence/txfence/functions/resubmit"
	_ "github.com/txfence/txfence/functions/submit"
)

func main() {
	if os.Getenv("FUNCTION_TARGET") == "" {
		// All functions share the port: mount the API's routes under /Api/.
		if err := funcframework.RegisterHTTPFunctionContext(context.Background(), "/Api/", api.Serve); err != nil {
			log.Fatalf("server: %v", err)
		}
	}
	if addr := os.Getenv("TXFENCE_PPROF_ADDR"); addr != "" {
		servePprof(addr)
	}
	go flushOnStop()
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host := os.Getenv("HOST") // empty: all interfaces, as Cloud Run expects
	if err := funcframework.StartHostPort(host, port); err != nil {
		log.Fatalf("server: %v", err)
	}
}

// flushOnStop exports the telemetry not yet exported when Cloud Run stops
// the instance (SIGTERM, then ten seconds before SIGKILL), and exits. With
// CPU allocated only during requests the periodic export may lag; this is
// what keeps the last interval's counts.
func flushOnStop() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := deps.Shutdown(ctx); err != nil {
		log.Printf("server: telemetry at shutdown: %v", err)
	}
	cancel()
	os.Exit(0)
}

// servePprof serves Go's profiles on addr, which must be a loopback
// address: profiling is for benchmarks on this machine (bench-api -profile,
// bench-pipeline's CPU by function), never reachable from outside.
func servePprof(addr string) {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Fatalf("server: TXFENCE_PPROF_ADDR must be a loopback host:port, got %q", addr)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { log.Printf("server: pprof: %v", srv.ListenAndServe()) }()
}
