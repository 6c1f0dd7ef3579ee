// Command server serves txfence's functions with the Functions Framework.
// In deployment each Cloud Run service sets FUNCTION_TARGET to the one
// function it runs (served at /); without it every function is served at
// /<Name> (the emulator runs it that way), and the API's routes at /Api/...
package main

import (
	"context"
	"log"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	"github.com/txfence/txfence/functions/api"
	_ "github.com/txfence/txfence/functions/finality"
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
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host := os.Getenv("HOST") // empty: all interfaces, as Cloud Run expects
	if err := funcframework.StartHostPort(host, port); err != nil {
		log.Fatalf("server: %v", err)
	}
}
