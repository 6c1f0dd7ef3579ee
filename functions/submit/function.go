package submit

import (
	"context"
	"os"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/txfence/txfence/functions/internal/deps"
	fnevent "github.com/txfence/txfence/functions/internal/event"
	"github.com/txfence/txfence/functions/internal/ready"
	"github.com/txfence/txfence/shared/app"
)

// The Functions Framework's own CloudEvent serving can wedge under concurrent
// pushes (see fnevent.Handler). GET /ready is Cloud Run's startup probe.
func init() {
	functions.HTTP("Submit", ready.Probe(ready.Databases(os.LookupEnv), fnevent.Handler(handle)))
}

var lazy = deps.Lazy[*Handler]{Build: Build}

// Build is the Submit handler over the process's dependencies: one
// DrainSigner per shard (the one database being the one shard), each
// signer's prompt routed to its shard's.
func Build(ctx context.Context, p *deps.Process) (*Handler, error) {
	signers, err := p.Signers(ctx)
	if err != nil {
		return nil, err
	}
	by, err := deps.PerShard(p, func(sh *deps.Shard) (*app.DrainSigner, error) {
		return app.NewDrainSigner(sh.Store, sh.Store.Leases(), p.ChainPorts(), signers, sh.Relay, p.Config.Drain(), p.Metrics, p.Log)
	})
	if err != nil {
		return nil, err
	}
	drain, err := app.NewShardedDrain(p.Router, by)
	if err != nil {
		return nil, err
	}
	return NewHandler(drain, p.Config.ResubmitInterval, p.Metrics, p.Log)
}

// handle is the deployed entry point; an error makes Pub/Sub redeliver.
func handle(ctx context.Context, e event.Event) error {
	h, err := lazy.Get(ctx)
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}
