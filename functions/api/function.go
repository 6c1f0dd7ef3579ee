package api

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/txm"
)

func init() { functions.HTTP("Api", Serve) }

var lazy = deps.Lazy[*Handler]{Build: func(ctx context.Context, p *deps.Process) (*Handler, error) {
	readers := map[uint64]app.ChainReader{}
	nonces := map[uint64]txm.NonceSource{}
	views := map[uint64]txm.ChainView{}
	for id, c := range p.Chains {
		readers[id], nonces[id], views[id] = c, c, c
	}
	authn, policies, err := p.Auth(ctx)
	if err != nil {
		return nil, err
	}
	create, err := app.NewCreateTx(p.Store, readers, p.Relay, policies, p.Config, p.Metrics, p.Log)
	if err != nil {
		return nil, err
	}
	actions, err := app.NewRequestAction(p.Store, p.Relay, p.Config.MaxFeeCap, p.Log)
	if err != nil {
		return nil, err
	}
	follow, err := app.NewFollowCompletions(p.Store, p.Store, p.Config.Auth.MaxWaits, p.Log)
	if err != nil {
		return nil, err
	}
	return NewHandler(Deps{Config: p.Config, Auth: authn, Policies: policies, PolicyStore: p.PolicyStore, Create: create, Queries: p.Store,
		Completions: follow, Actions: actions, ActionLog: p.Store, Operator: p.Store, Nonces: nonces, Views: views, Metrics: p.Metrics, Log: p.Log})
}}

// Serve is the deployed entry point: it builds the handler on first use.
func Serve(w http.ResponseWriter, r *http.Request) {
	h, err := lazy.Get(r.Context())
	if err != nil {
		// The reason goes to the log only: it may name hosts, roles or paths.
		slog.ErrorContext(r.Context(), "api unavailable", slog.Any("error", err))
		writeProblem(w, unavailable("txfence is starting or its dependencies are unreachable"))
		return
	}
	h.ServeHTTP(w, r)
}
