package sharded

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/functions/outbox"
)

// TestOutboxSweep_MeasuresEachShard: the OutboxSweep of a sharded
// deployment publishes every shard's left-behind rows and measures what is
// left in each, labelled by shard; a shard that does not answer is named
// in its error, the others are measured, and its gauges keep what they
// last said (an outbox nobody can read is no better than a full one).
func TestOutboxSweep_MeasuresEachShard(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second PostgreSQL server")
	}
	w := newWorld(t, 2)
	w.WithPubSub(t)
	t.Setenv("PUBSUB_EMULATOR_HOST", w.PubSub.Addr) // as the stack's processes reach it
	p := w.process(t, "sweeper")
	s, err := outbox.Build(ctx, p)
	require.NoError(t, err)

	// Rows whose writers crashed before relaying them: shard a's can be
	// published, shard b's go to a topic that does not exist.
	_, err = w.pools["a"].Exec(ctx, `INSERT INTO outbox (topic, payload, created_at)
VALUES ($1, '{}', clock_timestamp() - interval '1 minute')`, w.Cfg.TopicSubmit)
	require.NoError(t, err)
	_, err = w.pools["b"].Exec(ctx, `INSERT INTO outbox (topic, payload, created_at)
VALUES ('absent-topic', '{}', clock_timestamp() - interval '10 minutes'), ('absent-topic', '{}', clock_timestamp())`)
	require.NoError(t, err)

	st, err := s.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shard b")
	assert.NotContains(t, err.Error(), "shard a")
	assert.Equal(t, 1, st.Sent, "shard a's row")
	require.Len(t, st.Backlog, 2)
	assert.Equal(t, outbox.Backlog{Shard: "a"}, st.Backlog[0])
	b := st.Backlog[1]
	assert.Equal(t, outbox.Backlog{Shard: "b", Rows: 2, Failing: 1, OldestSeconds: b.OldestSeconds}, b,
		"the young row is left to its writer, the old one failed")
	assert.InDelta(t, 600, b.OldestSeconds, 30)
	gauge := func(name, shard string) float64 {
		t.Helper()
		v, ok := p.Metrics.Gauge(name, "shard", shard)
		require.True(t, ok, "%s of shard %s", name, shard)
		return v
	}
	assert.Zero(t, gauge("outbox_backlog_rows", "a"))
	assert.Zero(t, gauge("outbox_oldest_age_seconds", "a"))
	assert.EqualValues(t, 2, gauge("outbox_backlog_rows", "b"))
	assert.EqualValues(t, 1, gauge("outbox_failing_rows", "b"))
	assert.Equal(t, b.OldestSeconds, gauge("outbox_oldest_age_seconds", "b"))

	w.proxyB.Down()
	st, err = s.Run(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "shard b")
	assert.Equal(t, []outbox.Backlog{{Shard: "a"}}, st.Backlog, "the shard that answered")
	assert.EqualValues(t, 2, gauge("outbox_backlog_rows", "b"), "b's last figures stand")
	assert.Equal(t, b.OldestSeconds, gauge("outbox_oldest_age_seconds", "b"))
}
