package evm

import (
	"context"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/txfence/txfence/shared/txm"
)

var _ txm.CodeChecker = (*Client)(nil)

// maxCodeCache bounds the addresses whose code check is remembered; past it
// the cache starts again empty.
const maxCodeCache = 100_000

// codeCache remembers which addresses held code, and when that was read.
type codeCache struct {
	mu      sync.Mutex
	entries map[common.Address]codeEntry
}

type codeEntry struct {
	has bool
	at  time.Time
}

// HasCode reports, for each address, whether it holds code at the latest
// block. Answers younger than CodeCacheTTL are reused; the others are read
// in one batch of eth_getCode.
func (c *Client) HasCode(ctx context.Context, addrs []common.Address) ([]bool, error) {
	out := make([]bool, len(addrs))
	var ask []common.Address
	var where [][]int // indexes of out each asked address answers
	seen := map[common.Address]int{}
	now := time.Now()
	c.code.mu.Lock()
	for i, a := range addrs {
		if e, ok := c.code.entries[a]; ok && now.Sub(e.at) < c.opts.CodeCacheTTL {
			out[i] = e.has
			continue
		}
		if j, ok := seen[a]; ok {
			where[j] = append(where[j], i)
			continue
		}
		seen[a] = len(ask)
		ask = append(ask, a)
		where = append(where, []int{i})
	}
	c.code.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	has, err := batchCall(ctx, c, "get code", "eth_getCode", ask,
		func(a common.Address) []any { return []any{a, "latest"} },
		func(_ common.Address, code *hexutil.Bytes) (bool, error) { return len(*code) > 0, nil },
		func(a common.Address) string { return a.Hex() })
	if err != nil {
		return nil, err
	}
	c.code.mu.Lock()
	defer c.code.mu.Unlock()
	if c.code.entries == nil || len(c.code.entries)+len(ask) > maxCodeCache {
		c.code.entries = make(map[common.Address]codeEntry)
	}
	for j, a := range ask {
		c.code.entries[a] = codeEntry{has: has[j], at: now}
		for _, i := range where[j] {
			out[i] = has[j]
		}
	}
	return out, nil
}
