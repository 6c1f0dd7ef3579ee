package api

import (
	"net/http"
	"slices"
	"time"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// chainView is one configured chain and the health of its endpoints.
type chainView struct {
	ChainID   uint64           `json:"chainId"`
	Kind      config.ChainKind `json:"kind"`
	Endpoints []endpointView   `json:"endpoints"`
}

// endpointView is one endpoint as this instance's client last saw it: its
// name (never more of its URL than scheme and host), its state, head and
// lag, and the kind of its last failure, never its text.
type endpointView struct {
	Name           string            `json:"name"`
	SendOnly       bool              `json:"sendOnly"`
	PublicFallback bool              `json:"publicFallback,omitempty"`
	State          txm.EndpointState `json:"state"`
	Head           *uint64           `json:"head,omitempty"`
	Lag            uint64            `json:"lag"`
	CheckedAt      *time.Time        `json:"checkedAt,omitempty"`
	LastError      string            `json:"lastError,omitempty"`
	LastErrorAt    *time.Time        `json:"lastErrorAt,omitempty"`
}

// chains serves GET /v1/chains: every configured chain, in id order, with
// its endpoints' health. It reads no chain and no database: the clients
// report what their calls last saw.
func (h *Handler) chains(w http.ResponseWriter, _ *http.Request) {
	items := make([]chainView, 0, len(h.deps.Config.Chains))
	for _, ch := range h.deps.Config.Chains {
		v := chainView{ChainID: ch.ID, Kind: h.deps.Config.Profile(ch.ID).Kind, Endpoints: []endpointView{}}
		if r := h.deps.Endpoints[ch.ID]; r != nil {
			for _, e := range r.EndpointHealth() {
				ev := endpointView{Name: e.Name, SendOnly: e.SendOnly, PublicFallback: e.PublicFallback, State: e.State, Lag: e.Lag,
					CheckedAt: e.CheckedAt, LastError: e.LastError, LastErrorAt: e.LastErrorAt}
				if e.Head > 0 {
					head := e.Head
					ev.Head = &head
				}
				v.Endpoints = append(v.Endpoints, ev)
			}
		}
		items = append(items, v)
	}
	slices.SortFunc(items, func(a, b chainView) int {
		switch {
		case a.ChainID < b.ChainID:
			return -1
		case a.ChainID > b.ChainID:
			return 1
		}
		return 0
	})
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}
