package api

import (
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/time/rate"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/txm"
)

// limits are the per-instance token buckets: one per principal (every
// call) and one per signer (creates). Behind the load balancer each
// instance applies them to what it serves; Cloud Armor bounds the whole.
type limits struct {
	cfg config.Auth

	mu         sync.Mutex
	principals map[string]*bucket
	signers    map[signerKey]*bucket
}

type signerKey struct {
	chainID uint64
	signer  common.Address
}

type bucket struct {
	lim  *rate.Limiter
	rate float64 // what it was made with, to notice a policy change
	used time.Time
}

// idleBucket is how long an unused bucket is kept.
const idleBucket = 10 * time.Minute

func newLimits(cfg config.Auth) *limits {
	return &limits{cfg: cfg, principals: map[string]*bucket{}, signers: map[signerKey]*bucket{}}
}

// allowPrincipal takes a token from the principal's bucket.
func (l *limits) allowPrincipal(id string, pol txm.Policy) error {
	r, burst := l.cfg.RatePerSecond, l.cfg.RateBurst
	if pol.RatePerSecond > 0 {
		r, burst = pol.RatePerSecond, max(pol.Burst, 1)
	}
	l.mu.Lock()
	b := take(l.principals, id, r, burst)
	l.mu.Unlock()
	return wait(b, "principal")
}

// allowSigner takes a token from the signer's bucket.
func (l *limits) allowSigner(chainID uint64, signer common.Address) error {
	r := l.cfg.SignerRatePerSecond
	l.mu.Lock()
	b := take(l.signers, signerKey{chainID, signer}, r, max(int(2*r), 1))
	l.mu.Unlock()
	return wait(b, "signer")
}

// take finds or makes a bucket (callers hold mu) and prunes idle ones now
// and then.
func take[K comparable](m map[K]*bucket, k K, r float64, burst int) *rate.Limiter {
	now := time.Now()
	b, ok := m[k]
	if !ok || b.rate != r {
		if len(m) > 1024 {
			for key, old := range m {
				if now.Sub(old.used) > idleBucket {
					delete(m, key)
				}
			}
		}
		b = &bucket{lim: rate.NewLimiter(rate.Limit(r), burst), rate: r}
		m[k] = b
	}
	b.used = now
	return b.lim
}

// wait takes a token now or says when there will be one.
func wait(lim *rate.Limiter, scope string) error {
	res := lim.Reserve()
	if d := res.Delay(); d > 0 {
		res.Cancel()
		return &txm.RateLimitError{Scope: scope, RetryAfter: d}
	}
	return nil
}
