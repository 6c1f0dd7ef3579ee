// Command server serves txfence's functions with the Functions Framework.
// In deployment each Cloud Run service sets FUNCTION_TARGET to the one
// function it runs (served at /); without it every function is served at
// /<Name>.
package main

import (
	"log"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/funcframework"

	_ "github.com/txfence/txfence/functions/api"
	_ "github.com/txfence/txfence/functions/finality"
	_ "github.com/txfence/txfence/functions/outbox"
	_ "github.com/txfence/txfence/functions/receipt"
	_ "github.com/txfence/txfence/functions/submit"
)

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "8080"
	}
	host := os.Getenv("HOST") // empty: all interfaces, as Cloud Run expects
	if err := funcframework.StartHostPort(host, port); err != nil {
		log.Fatalf("server: %v", err)
	}
}
