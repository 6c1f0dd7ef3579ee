package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// DecodeCompletion reads a message of the completion topic (its data and
// attributes, as any Pub/Sub library hands them over) into the Completion
// the feed gives for the same event (an outcome, or a lifecycle step when
// the deployment publishes them). The shard, seq, type and version come
// from the body, else from the attributes; a message without a seq or a transaction
// id is not a completion and is refused.
func DecodeCompletion(data []byte, attributes map[string]string) (Completion, error) {
	var c Completion
	if err := json.Unmarshal(data, &c); err != nil {
		return Completion{}, fmt.Errorf("txfence: completion message: %w", err)
	}
	if c.Shard == "" {
		c.Shard = attributes["shard"]
	}
	if c.Seq == 0 {
		if s, ok := attributes["seq"]; ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return Completion{}, fmt.Errorf("txfence: completion message: seq attribute %q is not a number", s)
			}
			c.Seq = n
		}
	}
	if c.Type == "" {
		c.Type = attributes["type"]
	}
	if c.Version == 0 {
		if s, ok := attributes["version"]; ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return Completion{}, fmt.Errorf("txfence: completion message: version attribute %q is not a number", s)
			}
			c.Version = n
		}
	}
	if c.Seq <= 0 || c.TxID == "" {
		return Completion{}, errors.New("txfence: completion message: no seq or transaction id; not a completion")
	}
	return c, nil
}

// Seen remembers which outcomes were handled, by (shard, seq), so that a
// subscriber handles a redelivered message once. It keeps every key it is
// given; a long-running subscriber prunes it with Forget once its own
// store has the outcome. Safe for concurrent use.
type Seen struct {
	mu   sync.Mutex
	keys map[seenKey]struct{}
}

type seenKey struct {
	shard string
	seq   int64
}

// First reports whether c is the first time its (shard, seq) is seen, and
// remembers it.
func (s *Seen) First(c Completion) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys == nil {
		s.keys = map[seenKey]struct{}{}
	}
	k := seenKey{c.Shard, c.Seq}
	if _, dup := s.keys[k]; dup {
		return false
	}
	s.keys[k] = struct{}{}
	return true
}

// Forget drops c's key.
func (s *Seen) Forget(c Completion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, seenKey{c.Shard, c.Seq})
}
