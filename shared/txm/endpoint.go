package txm

import "time"

// EndpointState is how a chain's client uses one of its endpoints.
type EndpointState string

const (
	// EndpointHealthy: it answers, and its head is within the chain's lag
	// allowance of the best known head; reads go to the healthiest of
	// these and broadcasts to all of them.
	EndpointHealthy EndpointState = "healthy"
	// EndpointLagging: it answers, but its head is further behind the best
	// known head than the chain allows: it is not read from (nonces,
	// receipts, blocks, fees) until it catches up.
	EndpointLagging EndpointState = "lagging"
	// EndpointDead: its last call failed at the transport level (or it
	// serves another chain): it is passed over, and tried again after a
	// backoff that doubles with each failure in a row.
	EndpointDead EndpointState = "dead"
)

// EndpointStates are every EndpointState, in order of health.
var EndpointStates = []EndpointState{EndpointHealthy, EndpointLagging, EndpointDead}

// EndpointHealth is one endpoint of a chain as its client last saw it.
// Nothing in it carries the endpoint's URL beyond its scheme and host.
type EndpointHealth struct {
	// Name names the endpoint: "endpoint N (scheme://host)" for a read
	// endpoint, N its place in the configuration, or a send-only
	// endpoint's configured name.
	Name string
	// SendOnly is set for an endpoint that only receives broadcasts;
	// PublicFallback for one whose broadcasts go to the read endpoints too.
	SendOnly       bool
	PublicFallback bool
	State          EndpointState
	// Head is the block number it last reported (0: not known; a
	// send-only endpoint is never asked).
	Head uint64
	// Lag is how many blocks Head is behind the best head known.
	Lag uint64
	// CheckedAt is when its head was last read (nil: never).
	CheckedAt *time.Time
	// LastError is the kind of its last failure ("timeout", "http_502",
	// "connection", "wrong_chain", ...; "" for none), never its text.
	LastError   string
	LastErrorAt *time.Time
}

// EndpointHealthReader reports the health of a chain's endpoints.
type EndpointHealthReader interface {
	EndpointHealth() []EndpointHealth
}
