package config

import (
	"github.com/txfence/txfence/shared/txm"
)

// Auth says how callers are authenticated and what they may do.
type Auth struct {
	// Methods are the accepted credentials: "oidc" (Google-signed ID
	// tokens for Audience), "apikey" (keys created with the admin command),
	// "dev" (development: a call without a credential is the all-powerful
	// principal "dev"). Required: production refuses to start without one,
	// and "dev" is refused on Cloud Run.
	Methods  []string
	Audience string // the OIDC audience: the API's URL as its callers name it
	// PolicySeed is written as version 1 of each principal's policy that has
	// none (the first deploy's policies).
	PolicySeed []txm.Policy
	// Rate limits per instance: each principal's calls per second and burst
	// (unless its policy says otherwise), each signer's creates per second.
	RatePerSecond       float64
	RateBurst           int
	SignerRatePerSecond float64
	// MaxWaits caps a principal's concurrent completion long-polls per
	// instance (unless its policy says otherwise).
	MaxWaits int
}

// Has reports whether method is accepted.
func (a Auth) Has(method string) bool {
	for _, m := range a.Methods {
		if m == method {
			return true
		}
	}
	return false
}

// AuthMethods are the accepted values of TXFENCE_AUTH.
var AuthMethods = []string{"oidc", "apikey", "dev"}

func (c Config) validateAuth(bad func(env, format string, args ...any)) {
	a := c.Auth
	if len(a.Methods) == 0 {
		bad(EnvAuth, "is required: oidc, apikey and/or dev (development only), comma separated; txfence never serves unauthenticated calls by default")
	}
	for _, m := range a.Methods {
		ok := false
		for _, known := range AuthMethods {
			ok = ok || m == known
		}
		if !ok {
			bad(EnvAuth, "%q is not one of oidc, apikey, dev", m)
		}
	}
	if a.Has("oidc") && a.Audience == "" {
		bad(EnvOIDCAudience, "is required with %s=oidc: the audience callers' ID tokens are minted for (the API's URL)", EnvAuth)
	}
	if a.Has("dev") && c.onCloudRun {
		bad(EnvAuth, "dev (no authentication) is refused on Cloud Run (K_SERVICE is set)")
	}
	if a.RatePerSecond <= 0 || a.SignerRatePerSecond <= 0 {
		bad(EnvRatePerSecond, "the rates must be positive")
	}
	if a.RateBurst < 1 {
		bad(EnvRateBurst, "must be at least 1, got %d", a.RateBurst)
	}
	if a.MaxWaits < 1 {
		bad(EnvMaxWaits, "must be at least 1, got %d", a.MaxWaits)
	}
}
