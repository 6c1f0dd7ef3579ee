package submit

import (
	"context"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/shared/app"
)

func init() { functions.CloudEvent("Submit", handle) }

var lazy = deps.Lazy[*Handler]{Build: func(ctx context.Context, p *deps.Process) (*Handler, error) {
	signers, err := p.Signers(ctx)
	if err != nil {
		return nil, err
	}
	drain, err := app.NewDrainSigner(p.Store, p.Store.Leases(), p.ChainPorts(), signers, p.Relay, p.Config, p.Metrics, p.Log)
	if err != nil {
		return nil, err
	}
	return NewHandler(drain, p.Config.ResubmitInterval, p.Log)
}}

// handle is the deployed entry point; an error makes Pub/Sub redeliver.
func handle(ctx context.Context, e event.Event) error {
	h, err := lazy.Get(ctx)
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}
