package api

import (
	"context"
	"net/http"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/txm"
)

func init() { functions.HTTP("Api", Serve) }

var lazy = deps.Lazy[*Handler]{Build: func(_ context.Context, p *deps.Process) (*Handler, error) {
	readers := map[uint64]app.ChainReader{}
	nonces := map[uint64]txm.NonceSource{}
	for id, c := range p.Chains {
		readers[id], nonces[id] = c, c
	}
	create, err := app.NewCreateTx(p.Store, readers, p.Relay, p.Config, p.Metrics, p.Log)
	if err != nil {
		return nil, err
	}
	actions, err := app.NewRequestAction(p.Store, p.Relay, p.Config.MaxFeeCap, p.Log)
	if err != nil {
		return nil, err
	}
	return NewHandler(Deps{Config: p.Config, Create: create, Queries: p.Store, Completions: p.Store, Actions: actions, ActionLog: p.Store,
		Nonces: nonces, Metrics: p.Metrics, Log: p.Log})
}}

// Serve is the deployed entry point: it builds the handler on first use.
func Serve(w http.ResponseWriter, r *http.Request) {
	h, err := lazy.Get(r.Context())
	if err != nil {
		writeProblem(w, unavailable("txfence is starting or its dependencies are unreachable: "+err.Error()))
		return
	}
	h.ServeHTTP(w, r)
}
