package app

import "sync"

// coalescer runs at most one call per key at a time in this process. A call
// for a key that is already running returns at once without running (its
// caller acknowledges the prompt) and has the running call go round once
// more when it is done, so that nothing it was prompted for is missed: under
// load a hot signer's prompts arrive faster than its drains or receipt
// checks end, and each one queueing for the signer's lease only made a
// crowd that polled the database.
type coalescer[K comparable] struct {
	mu      sync.Mutex
	running map[K]bool // key running; true: go round once more
}

// do runs fn for key unless a call for key is running (ran false). fn
// reports whether it handed its remaining work on (a fresh prompt), in
// which case it does not go round again.
func (c *coalescer[K]) do(key K, fn func() (handedOn bool, err error)) (ran bool, err error) {
	c.mu.Lock()
	if c.running == nil {
		c.running = map[K]bool{}
	}
	if _, busy := c.running[key]; busy {
		c.running[key] = true
		c.mu.Unlock()
		return false, nil
	}
	c.running[key] = false
	c.mu.Unlock()
	for {
		handedOn, err := fn()
		c.mu.Lock()
		if err != nil || handedOn || !c.running[key] {
			delete(c.running, key)
			c.mu.Unlock()
			return true, err
		}
		c.running[key] = false
		c.mu.Unlock()
	}
}
