package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FeedCursor is a position in the completions feed: the last seq delivered
// from each shard (absent: none yet). Each shard numbers its completions
// itself, so with several shards one number cannot say where a reader is;
// with one database the cursor is that database's seq.
type FeedCursor map[string]int64

// ParseCursor reads a cursor: "" is the start of every shard; otherwise
// comma-separated entries, each SHARD:SEQ or a bare SEQ for the home shard
// ("12", "a:12,b:40", "12,b:40"), a shard named at most once.
func (m *MergedCompletions) ParseCursor(s string) (FeedCursor, error) {
	c := FeedCursor{}
	s = strings.TrimSpace(s)
	if s == "" {
		return c, nil
	}
	home := m.r.names[0]
	for _, part := range strings.Split(s, ",") {
		name, seq, named := strings.Cut(part, ":")
		if !named {
			name, seq = home, part
		}
		n, err := strconv.ParseInt(seq, 10, 64)
		switch {
		case err != nil || n < 0 || (named && name == ""):
			return nil, m.cursorError(part)
		case !m.known(name):
			return nil, fmt.Errorf("names shard %q, which this deployment does not have", name)
		}
		if _, twice := c[name]; twice {
			return nil, fmt.Errorf("gives shard %q twice (a bare number is the home shard %q)", name, home)
		}
		c[name] = n
	}
	return c, nil
}

// cursorError says what a cursor must be, in the deployment's terms.
func (m *MergedCompletions) cursorError(part string) error {
	if m.r.names[0] == "" {
		return errors.New("must be a non-negative integer or latest")
	}
	return fmt.Errorf("must be latest or the next cursor of a previous page, SHARD:SEQ[,SHARD:SEQ...] (e.g. %s:12; a bare number is the home shard's seq), got %q",
		m.r.names[0], part)
}

func (m *MergedCompletions) known(name string) bool {
	for _, n := range m.r.names {
		if n == name {
			return true
		}
	}
	return false
}

// FormatCursor renders c with every shard, in configuration order: the one
// database's cursor is its seq alone.
func (m *MergedCompletions) FormatCursor(c FeedCursor) string {
	parts := make([]string, len(m.r.names))
	for i, n := range m.r.names {
		parts[i] = strconv.FormatInt(c[n], 10)
		if n != "" {
			parts[i] = n + ":" + parts[i]
		}
	}
	return strings.Join(parts, ",")
}
