package submit

import (
	"context"
	"sync"

	"github.com/GoogleCloudPlatform/functions-framework-go/functions"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/functions/internal/deps"
	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/txm"
)

func init() { functions.CloudEvent("Submit", handle) }

var (
	handlerMu sync.Mutex
	handler   *Handler
)

// handle is the deployed entry point; an error makes Pub/Sub redeliver.
func handle(ctx context.Context, e event.Event) error {
	h, err := processHandler(ctx)
	if err != nil {
		return err
	}
	return h.Handle(ctx, e)
}

func processHandler(ctx context.Context) (*Handler, error) {
	handlerMu.Lock()
	defer handlerMu.Unlock()
	if handler != nil {
		return handler, nil
	}
	p, err := deps.Get(ctx)
	if err != nil {
		return nil, err
	}
	signers, err := p.Signers(ctx)
	if err != nil {
		return nil, err
	}
	chains := map[uint64]txm.Chain{}
	for id, c := range p.Chains {
		chains[id] = c
	}
	drain, err := app.NewDrainSigner(p.Store, p.Store.Leases(), chains, map[common.Address]txm.Signer(signers), p.Relay, p.Config, p.Metrics, p.Log)
	if err != nil {
		return nil, err
	}
	h, err := NewHandler(drain, p.Log)
	if err != nil {
		return nil, err
	}
	handler = h
	return h, nil
}
