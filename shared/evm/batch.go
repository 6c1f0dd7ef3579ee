package evm

import (
	"context"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/rpc"
)

// batchCall sends method once per key in JSON-RPC batches of at most
// MaxBatch calls (each retried as a whole on failover) and converts each
// non-null result; a null result yields the zero value at its index. Any
// element's error fails the whole call, each named by name(key).
func batchCall[K any, R any, T any](ctx context.Context, c *Client, what, method string, keys []K,
	args func(K) []any, convert func(K, *R) (T, error), name func(K) string) ([]T, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	results := make([]*R, len(keys))
	elems := make([]rpc.BatchElem, len(keys))
	for lo := 0; lo < len(keys); lo += c.opts.MaxBatch {
		hi := min(lo+c.opts.MaxBatch, len(keys))
		err := c.do(ctx, func(ctx context.Context, rc *rpc.Client) error {
			for i := lo; i < hi; i++ {
				results[i] = nil
				elems[i] = rpc.BatchElem{Method: method, Args: args(keys[i]), Result: &results[i]}
			}
			return rc.BatchCallContext(ctx, elems[lo:hi])
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	var errs []error
	out := make([]T, len(keys))
	for i, k := range keys {
		if err := elems[i].Error; err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name(k), c.hideURLs(err)))
			continue
		}
		if results[i] == nil {
			continue
		}
		v, err := convert(k, results[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name(k), err))
			continue
		}
		out[i] = v
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %w", what, errors.Join(errs...))
	}
	return out, nil
}
