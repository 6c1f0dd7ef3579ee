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

var lazy = deps.Lazy[*Handler]{Build: Build}

// Build is the API handler over the process's dependencies: each shard
// (the one database being the one shard) has its own create, actions,
// approvals and feed use cases, and the handler routes a signer's work to its shard,
// looks transaction ids up in the shard that holds them, and merges the
// feeds.
func Build(ctx context.Context, p *deps.Process) (*Handler, error) {
	readers := map[uint64]app.ChainReader{}
	nonces := map[uint64]txm.NonceSource{}
	views := map[uint64]txm.ChainView{}
	sims := map[uint64]txm.Simulator{}
	delegations := map[uint64]txm.DelegationReader{}
	endpoints := map[uint64]txm.EndpointHealthReader{}
	for id, c := range p.Chains {
		readers[id], nonces[id], views[id], sims[id], delegations[id], endpoints[id] = c, c, c, c, c, c
	}
	authn, policies, err := p.Auth(ctx)
	if err != nil {
		return nil, err
	}
	d := Deps{Config: p.Config, Auth: authn, Policies: policies, PolicyStore: p.PolicyStore, Nonces: nonces, Views: views,
		Simulators: sims, Delegations: delegations, Endpoints: endpoints, Metrics: p.Metrics, Log: p.Log}
	creates, err := deps.PerShard(p, func(sh *deps.Shard) (*app.CreateTx, error) {
		return app.NewCreateTx(sh.Store, readers, sh.Relay, policies, p.Config.Create(), p.Metrics, p.Log)
	})
	if err != nil {
		return nil, err
	}
	actions, err := deps.PerShard(p, func(sh *deps.Shard) (*app.RequestAction, error) {
		return app.NewRequestAction(sh.Store, sh.Relay, p.Config.MaxFeeCap, p.Log)
	})
	if err != nil {
		return nil, err
	}
	feeds, err := deps.PerShard(p, func(sh *deps.Shard) (*app.FollowCompletions, error) {
		return app.NewFollowCompletions(sh.Store, sh.Store, p.Config.Auth.MaxWaits, p.Log)
	})
	if err != nil {
		return nil, err
	}
	stores, err := deps.PerShard(p, func(sh *deps.Shard) (app.ShardStore, error) { return sh.Store, nil })
	if err != nil {
		return nil, err
	}
	operators, err := deps.PerShard(p, func(sh *deps.Shard) (txm.OperatorQueries, error) { return sh.Store, nil })
	if err != nil {
		return nil, err
	}
	queries, err := app.NewShardedQueries(p.Router, stores)
	if err != nil {
		return nil, err
	}
	if d.Create, err = app.NewShardedCreate(p.Router, creates, p.Config.Create()); err != nil {
		return nil, err
	}
	if d.Actions, err = app.NewShardedActions(queries, actions); err != nil {
		return nil, err
	}
	if d.Completions, err = app.NewMergedCompletions(p.Router, feeds); err != nil {
		return nil, err
	}
	if d.Operator, err = app.NewShardedOperator(p.Router, operators, queries); err != nil {
		return nil, err
	}
	approves, err := deps.PerShard(p, func(sh *deps.Shard) (*app.ApproveTx, error) {
		finish, err := app.NewFinishApproval(sh.Store, creates[sh.Name], policies, sh.Relay, p.Log)
		if err != nil {
			return nil, err
		}
		return app.NewApproveTx(sh.Store, finish, policies, p.Log)
	})
	if err != nil {
		return nil, err
	}
	rejects, err := deps.PerShard(p, func(sh *deps.Shard) (*app.RejectTx, error) {
		return app.NewRejectTx(sh.Store, policies, sh.Relay, p.Log)
	})
	if err != nil {
		return nil, err
	}
	if d.Approvals, err = app.NewShardedApprovals(queries, approves, rejects); err != nil {
		return nil, err
	}
	d.Queries, d.ActionLog = queries, queries
	return NewHandler(d)
}

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
