package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// parallel runs n calls of fn over workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
}

func TestIssue3_ConcurrentReplays(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	signer := signers(1)[0]
	b.chain.setPending(signer, 3)
	body := transfer(signer, 42, "order-1")

	resps := make([]response, 100)
	parallel(100, 100, func(i int) { resps[i] = b.create(t, b.insts[i%3], body) })

	created := 0
	id := ""
	for _, r := range resps {
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, r.status, "body: %s", r.raw)
		if r.status == http.StatusAccepted {
			created++
		}
		if id == "" {
			id = r.tx.ID
		}
		assert.Equal(t, id, r.tx.ID, "every response names the same transaction")
		assert.EqualValues(t, 3, r.tx.nonce())
	}
	assert.Equal(t, 1, created, "exactly one 202")
	assert.Equal(t, []int64{3}, b.nonces(t, signer), "exactly one row")
	assert.EqualValues(t, 4, b.cursor(t, signer), "exactly one nonce consumed")
}

func TestIssue3_ConflictingReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	signer := signers(1)[0]

	first := b.create(t, b.insts[0], transfer(signer, 1, "pay-7"))
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.raw)
	before := b.counts(t)

	// The same id, another payload, through every instance and through the header.
	for i, inst := range b.insts {
		r := b.create(t, inst, transfer(signer, 2, "pay-7"))
		require.Equal(t, http.StatusConflict, r.status, "%s", r.raw)
		assert.Equal(t, first.tx.ID, r.prob.ExistingID, "instance %d names the existing tx", i)
		assert.Contains(t, r.prob.Detail, first.tx.ID)
	}
	body := transfer(signer, 3, "")
	r := b.create(t, b.insts[1], body, "Idempotency-Key", "pay-7")
	require.Equal(t, http.StatusConflict, r.status, "%s", r.raw)
	assert.Equal(t, first.tx.ID, r.prob.ExistingID)
	assert.Equal(t, before, b.counts(t), "a conflict writes nothing")
	assert.EqualValues(t, 1, b.cursor(t, signer), "no nonce consumed")

	// Racing payloads for a fresh id: one wins, the other side all conflict.
	resps := make([]response, 60)
	parallel(60, 60, func(i int) { resps[i] = b.create(t, b.insts[i%3], transfer(signer, int64(100+i%2), "race-1")) })
	var winner int64 = -1
	for i, r := range resps {
		if r.status == http.StatusAccepted || r.status == http.StatusOK {
			if winner == -1 {
				winner = int64(i % 2)
			}
			assert.EqualValues(t, winner, i%2, "only one payload can own the id")
		} else {
			assert.Equal(t, http.StatusConflict, r.status, "%s", r.raw)
		}
	}
	assert.Equal(t, []int64{0, 1}, b.nonces(t, signer), "one more row, one more nonce")
}

func TestIssue3_OneHotSigner(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	signer := signers(1)[0]
	const n0, n = 17, 1000
	b.chain.setPending(signer, n0)

	resps := make([]response, n)
	parallel(n, n, func(i int) { resps[i] = b.create(t, b.insts[i%3], transfer(signer, int64(i), "")) })
	seen := map[uint64]bool{}
	for _, r := range resps {
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
		require.False(t, seen[r.tx.nonce()], "nonce %d answered twice", r.tx.nonce())
		seen[r.tx.nonce()] = true
	}
	got := b.nonces(t, signer)
	require.Len(t, got, n)
	requireContiguous(t, got, n0, "one hot signer")
	assert.EqualValues(t, n0+n, b.cursor(t, signer))

	var batches int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(DISTINCT fencing_token) FROM managed_tx`).Scan(&batches))
	t.Logf("%d creates committed in %d allocation batches", n, batches)
}

func TestIssue3_ManySignersMixed(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	ss := signers(200)
	for i, s := range ss {
		b.chain.setPending(s, uint64(i%7)) // some signers start past zero
	}
	const total = 10000
	type sent struct {
		signer int
		value  int64
		id     string
	}
	// Plan: each op is new (with or without a request id), a replay of an
	// earlier id, or a conflict on one. Replays and conflicts name ids from
	// the same worker's earlier successes so their originals exist.
	var (
		mu                             sync.Mutex
		created                        = map[string]string{} // request id -> tx id
		newCount, replayOK, conflictOK atomic.Int64
		unexpected                     atomic.Int64
	)
	workers := 48
	parallel(total, workers, func(i int) {
		rnd := rand.New(rand.NewPCG(uint64(i), 7))
		inst := b.insts[i%3]
		s := rnd.IntN(len(ss))
		kind := rnd.IntN(10)
		if kind >= 7 {
			mu.Lock()
			var pick *sent
			for rid, id := range created { // any earlier success
				_ = id
				var sig int
				var val int64
				fmt.Sscanf(rid, "s%d-v%d", &sig, &val)
				pick = &sent{signer: sig, value: val, id: rid}
				break
			}
			mu.Unlock()
			if pick != nil {
				if kind < 9 { // replay
					r := b.create(t, inst, transfer(ss[pick.signer], pick.value, pick.id))
					mu.Lock()
					want := created[pick.id]
					mu.Unlock()
					if r.status == http.StatusOK && r.tx.ID == want {
						replayOK.Add(1)
					} else {
						unexpected.Add(1)
						t.Errorf("replay of %s: %d %s", pick.id, r.status, r.raw)
					}
				} else { // conflict
					r := b.create(t, inst, transfer(ss[pick.signer], pick.value+1_000_000, pick.id))
					if r.status == http.StatusConflict {
						conflictOK.Add(1)
					} else {
						unexpected.Add(1)
						t.Errorf("conflict on %s: %d %s", pick.id, r.status, r.raw)
					}
				}
				return
			}
		}
		rid := ""
		if kind%2 == 0 {
			rid = fmt.Sprintf("s%d-v%d", s, i)
		}
		r := b.create(t, inst, transfer(ss[s], int64(i), rid))
		if r.status != http.StatusAccepted {
			unexpected.Add(1)
			t.Errorf("create %d: %d %s", i, r.status, r.raw)
			return
		}
		newCount.Add(1)
		if rid != "" {
			mu.Lock()
			created[rid] = r.tx.ID
			mu.Unlock()
		}
	})
	require.Zero(t, unexpected.Load())
	t.Logf("%d new, %d replays, %d conflicts", newCount.Load(), replayOK.Load(), conflictOK.Load())
	require.Positive(t, replayOK.Load())
	require.Positive(t, conflictOK.Load())

	rows := 0
	for i, s := range ss {
		got := b.nonces(t, s)
		rows += len(got)
		if len(got) == 0 {
			continue
		}
		requireContiguous(t, got, int64(i%7), fmt.Sprintf("signer %d", i))
		assert.EqualValues(t, int64(i%7)+int64(len(got)), b.cursor(t, s), "signer %d cursor", i)
	}
	assert.EqualValues(t, newCount.Load(), rows, "one row per 202, none for replays or conflicts")
}

func TestIssue3_LeaseLostMidBatch(t *testing.T) {
	t.Parallel()
	// A lease long enough that a loaded machine does not lose it in an
	// ordinary batch, short enough to stall past.
	b := setup(t, 3, func(c *config.Config) {
		c.Lease.Duration = time.Second
		c.Lease.RenewEvery = 300 * time.Millisecond
		c.Lease.ClockSkew = 100 * time.Millisecond
	})
	signer := signers(1)[0]
	seed := b.create(t, b.insts[1], transfer(signer, 1, "seed"))
	require.Equal(t, http.StatusAccepted, seed.status, "%s", seed.raw)

	// Instance 0's next batch stalls inside its allocation, after taking the
	// nonce lease, until the lease has expired by database time: a trigger
	// sleeps on the first stalled row it sees (a sequence, which a rollback
	// does not undo, makes it fire once).
	ctx := context.Background()
	_, err := b.db.Pool.Exec(ctx, `
CREATE SEQUENCE stall_once;
CREATE FUNCTION stall_allocation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval('stall_once') = 1 THEN
        PERFORM pg_sleep(2);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER stall_allocation BEFORE INSERT ON managed_tx
    FOR EACH ROW WHEN (NEW.request_id LIKE 'stalled-%') EXECUTE FUNCTION stall_allocation();`)
	require.NoError(t, err)
	entered := make(chan struct{})
	go func() {
		defer close(entered)
		testsupport.Within(time.Minute, func() bool {
			var fired bool
			err := b.db.Pool.QueryRow(ctx, `SELECT is_called FROM stall_once`).Scan(&fired)
			return err != nil || fired
		})
	}()
	type sent struct {
		requestID string
		response
	}
	var stalled []sent
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rid := fmt.Sprintf("stalled-%d", i)
			r := b.create(t, b.insts[0], transfer(signer, 10, rid))
			mu.Lock()
			stalled = append(stalled, sent{rid, r})
			mu.Unlock()
		}(i)
	}
	<-entered
	// Meanwhile the other instances allocate for the same signer; they queue
	// on the lease row until the stalled batch is over.
	others := make([]response, 20)
	parallel(20, 20, func(i int) { others[i] = b.create(t, b.insts[1+i%2], transfer(signer, 20, fmt.Sprintf("other-%d", i))) })
	wg.Wait()

	stalledFailed := 0
	for _, r := range stalled {
		if r.status == http.StatusServiceUnavailable {
			stalledFailed++
			assert.Equal(t, "1", r.header.Get("Retry-After"))
		} else {
			assert.Equal(t, http.StatusAccepted, r.status, "%s", r.raw) // a later batch of instance 0
		}
	}
	require.Positive(t, stalledFailed, "the stalled batch must fail")
	for _, r := range others {
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	}
	// Nothing of the stalled batch committed: the request ids answered 503
	// name no transaction.
	for _, r := range stalled {
		if r.status != http.StatusServiceUnavailable {
			continue
		}
		_, err := b.insts[1].store.FindByRequestID(context.Background(), testChain, signer, r.requestID)
		require.True(t, errors.Is(err, txm.ErrNotFound), "%s: %v", r.requestID, err)
	}
	// Invariant 8: every committed batch wrote its submit prompt with it, and
	// the rolled-back one wrote none (each batch takes a new nonce-lease token).
	var prompts, batches int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM outbox WHERE topic = $1), (SELECT count(DISTINCT fencing_token) FROM managed_tx)`,
		b.cfg.TopicSubmit).Scan(&prompts, &batches))
	assert.Equal(t, batches, prompts, "one outbox row per committed batch, none for the fenced one")
	var failedRows int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM managed_tx WHERE request_id LIKE 'stalled-%'`).Scan(&failedRows))
	assert.Equal(t, len(stalled)-stalledFailed, failedRows, "the fenced batch committed nothing")
	got := b.nonces(t, signer)
	requireContiguous(t, got, 0, "after a fenced batch")
	assert.EqualValues(t, len(got), b.cursor(t, signer))
	assert.Positive(t, b.insts[0].metrics.Count("lease_fenced_total", "op", "allocate_insert")+
		b.insts[0].metrics.Count("lease_fenced_total", "op", "allocate_cursor"), "the fenced write was counted")

	// The client retries and succeeds, continuing the sequence.
	retry := b.create(t, b.insts[0], transfer(signer, 10, "stalled-retry"))
	require.Equal(t, http.StatusAccepted, retry.status, "%s", retry.raw)
	assert.EqualValues(t, len(got), retry.tx.nonce())
}

func TestIssue3_ChainAhead(t *testing.T) {
	t.Parallel()
	b := setup(t, 3)
	signer := signers(1)[0]
	b.chain.setPending(signer, 500) // nonces 0..499 were used outside txfence

	first := b.create(t, b.insts[0], transfer(signer, 1, ""))
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.raw)
	assert.EqualValues(t, 500, first.tx.nonce(), "starts at the chain's pending nonce")
	require.EqualValues(t, 1, b.chain.pendingCalls.Load())

	// The chain moves on, but inside nonceStateTimeout nobody asks it again:
	// the synced time in the database is every instance's cache.
	b.chain.setPending(signer, 900)
	resps := make([]response, 30)
	parallel(30, 30, func(i int) { resps[i] = b.create(t, b.insts[i%3], transfer(signer, 2, "")) })
	for _, r := range resps {
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	}
	assert.EqualValues(t, 1, b.chain.pendingCalls.Load(), "the chain is not asked again within nonceStateTimeout")
	requireContiguous(t, b.nonces(t, signer), 500, "after the first sync")

	// A chain that cannot be asked when it must be: 503, nothing written.
	other := signers(2)[1]
	b.chain.fail.Store(true)
	before := b.counts(t)
	r := b.create(t, b.insts[1], transfer(other, 1, ""))
	assert.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.raw)
	assert.Equal(t, before, b.counts(t))
}

func TestIssue3_ChainSyncExpires(t *testing.T) {
	t.Parallel()
	// A roomy timeout: a loaded machine must not make the sync stale early.
	b := setup(t, 2, func(c *config.Config) { c.NonceStateTimeout = 1500 * time.Millisecond })
	signer := signers(1)[0]
	b.chain.setPending(signer, 5)
	r := b.create(t, b.insts[0], transfer(signer, 1, ""))
	require.EqualValues(t, 5, r.tx.nonce())
	b.chain.setPending(signer, 40)
	r = b.create(t, b.insts[1], transfer(signer, 1, ""))
	require.EqualValues(t, 6, r.tx.nonce(), "the cached sync is still fresh")
	calls := b.chain.pendingCalls.Load()
	// sleep: the cached sync must grow older than NonceStateTimeout; that it is then asked again, once, is under test
	time.Sleep(1600 * time.Millisecond)
	r = b.create(t, b.insts[1], transfer(signer, 1, ""))
	assert.EqualValues(t, 40, r.tx.nonce(), "a stale sync asks the chain, which is ahead")
	assert.Equal(t, calls+1, b.chain.pendingCalls.Load())
	b.chain.setPending(signer, 3) // a chain behind the cursor never moves it back
	// sleep: again past NonceStateTimeout, so that the chain is asked
	time.Sleep(1600 * time.Millisecond)
	r = b.create(t, b.insts[0], transfer(signer, 1, ""))
	assert.EqualValues(t, 41, r.tx.nonce())
	assert.Equal(t, calls+2, b.chain.pendingCalls.Load())
}

func TestIssue3_MalformedRequests(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, func(c *config.Config) {
		c.Chains = append(c.Chains, config.Chain{ID: 1, RPCURLs: []string{"http://127.0.0.1:1"}})
		c.MaxDataBytes = 1024
	})
	// A valid transaction first, so row counts are not trivially zero.
	ok := transfer(signers(1)[0], 1, "fine")
	require.Equal(t, http.StatusAccepted, b.create(t, b.insts[0], ok).status)
	ok2 := mustJSON(transfer(signers(1)[0], 1, "stray")) // valid but for what follows it
	from := signers(1)[0].Hex()
	with := func(k string, v any) string {
		m := transfer(signers(1)[0], 1, "")
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return mustJSON(m)
	}
	cases := []struct {
		name   string
		body   string
		status int
		field  string
	}{
		{"not JSON", `{"from": `, 400, ""},
		{"a JSON array", `[1,2]`, 400, ""},
		{"two objects", `{} {}`, 400, ""},
		{"an object and a stray brace", ok2 + `}`, 400, ""},
		{"unknown field", with("nonce", 5), 400, "nonce"},
		{"missing from", with("from", nil), 422, "from"},
		{"from bad hex", with("from", "0xZZ00000000000000000000000000000000005000"), 422, "from"},
		{"from too short", with("from", "0x1234"), 422, "from"},
		{"from without 0x", with("from", strings.TrimPrefix(from, "0x")), 422, "from"},
		{"to checksum mismatch", with("to", "0x000000000000000000000000000000000000DeaD"), 422, "to"},
		{"to as a number", with("to", 12), 422, "to"},
		{"negative value", with("value", "-1"), 422, "value"},
		{"value overflows 2^256", with("value", "0x1"+strings.Repeat("0", 64)), 422, "value"},
		{"value as a JSON number", with("value", 5), 422, "value"},
		{"value not a number", with("value", "12abc"), 422, "value"},
		{"data odd length", with("data", "0xabc"), 422, "data"},
		{"data not hex", with("data", "0xzz"), 422, "data"},
		{"data without 0x", with("data", "abcd"), 422, "data"},
		{"oversize data", with("data", "0x"+strings.Repeat("ab", 1025)), 422, "data"},
		{"gas limit zero", with("gasLimit", 0), 422, "gasLimit"},
		{"gas limit over the cap", with("gasLimit", 40_000_000), 422, "gasLimit"},
		{"gas limit negative", with("gasLimit", -5), 422, "gasLimit"},
		{"fee over the cap", with("maxFeePerGas", "1"+strings.Repeat("0", 20)), 422, "maxFeePerGas"},
		{"tip above max fee", mustJSON(map[string]any{"chainId": testChain, "from": from, "to": "0x000000000000000000000000000000000000dEaD", "gasLimit": 21000, "maxFeePerGas": "10", "maxPriorityFeePerGas": "11"}), 422, "maxPriorityFeePerGas"},
		{"unknown signer", with("from", "0x00000000000000000000000000000000000000ff"), 422, "from"},
		{"wrong chain", with("chainId", 5), 422, "chainId"},
		{"chain id missing with two chains", with("chainId", nil), 422, "chainId"},
		{"chain id negative", with("chainId", -1), 422, "chainId"},
		{"contract creation without code", with("to", nil), 422, "data"},
		{"empty request id", with("requestId", ""), 422, "requestId"},
		{"metadata not an object", with("metadata", []int{1}), 422, "metadata"},
		{"call would revert", mustJSON(map[string]any{"chainId": testChain, "from": from, "to": "0x000000000000000000000000000000000000dEaD", "data": "0xdead"}), 422, "data"},
	}
	require.GreaterOrEqual(t, len(cases), 20)
	before := b.counts(t)
	for _, tc := range cases {
		r := b.do(t, b.insts[0], http.MethodPost, "/v1/transactions", tc.body)
		assert.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.raw)
		assert.Equal(t, "application/problem+json", r.header.Get("Content-Type"), tc.name)
		assert.Equal(t, tc.status, r.prob.Status, tc.name)
		assert.NotEmpty(t, r.prob.Type, tc.name)
		assert.NotEmpty(t, r.prob.Title, tc.name)
		if tc.field != "" {
			var fields []string
			for _, f := range r.prob.Errors {
				fields = append(fields, f.Field)
				assert.NotEmpty(t, f.Message, tc.name)
			}
			assert.Contains(t, fields, tc.field, "%s names the field: %s", tc.name, r.raw)
		}
	}
	r := b.do(t, b.insts[0], http.MethodPost, "/v1/transactions", `{}`, "Content-Type", "text/plain")
	assert.Equal(t, http.StatusUnsupportedMediaType, r.status)
	r = b.do(t, b.insts[0], http.MethodPost, "/v1/transactions", with("requestId", "a"), "Idempotency-Key", "b")
	assert.Equal(t, http.StatusUnprocessableEntity, r.status)
	assert.Equal(t, before, b.counts(t), "bad input changes nothing")
}

func mustJSON(v any) string {
	j, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(j)
}

// TestIssue11_UnstorableText: a request id or metadata that PostgreSQL
// cannot store (an Idempotency-Key that is not UTF-8, a NUL character) is
// refused with 422 before it reaches a batch, so it neither writes anything
// nor fails the other creates batched with it. (FuzzDecodeCreate found the
// first.)
func TestIssue11_UnstorableText(t *testing.T) {
	t.Parallel()
	b := setup(t, 1, func(c *config.Config) { c.BatchWait = 50 * time.Millisecond })
	s := signers(1)[0]
	before := b.counts(t)
	bad := []struct {
		name   string
		body   map[string]any
		header []string
		field  string
	}{
		{"Idempotency-Key not UTF-8", transfer(s, 1, ""), []string{"Idempotency-Key", "\xe8"}, "requestId"},
		{"request id with NUL", transfer(s, 1, "a\x00b"), nil, "requestId"},
		{"request id with a control character", transfer(s, 1, "a\x1bb"), nil, "requestId"},
		{"metadata string with NUL", withMetadata(transfer(s, 1, ""), `{"note":"a\u0000b"}`), nil, "metadata"},
		{"metadata key with NUL", withMetadata(transfer(s, 1, ""), `{"a\u0000":1}`), nil, "metadata"},
		{"metadata number out of range", withMetadata(transfer(s, 1, ""), `{"n":1e1000000}`), nil, "metadata"},
		{"metadata nested deeply", withMetadata(transfer(s, 1, ""), `{"a":`+strings.Repeat("[", 5000)+strings.Repeat("]", 5000)+`}`), nil, "metadata"},
	}
	var wg sync.WaitGroup
	results := make([]response, len(bad))
	good := make([]response, len(bad))
	for i, tc := range bad {
		wg.Add(2)
		go func() { defer wg.Done(); results[i] = b.create(t, b.insts[0], tc.body, tc.header...) }()
		go func() { defer wg.Done(); good[i] = b.create(t, b.insts[0], transfer(s, 1, fmt.Sprintf("good-%d", i))) }()
	}
	wg.Wait()
	for i, tc := range bad {
		assert.Equal(t, http.StatusUnprocessableEntity, results[i].status, "%s: %s", tc.name, results[i].raw)
		var fields []string
		for _, f := range results[i].prob.Errors {
			fields = append(fields, f.Field)
		}
		assert.Contains(t, fields, tc.field, tc.name)
		assert.Equal(t, http.StatusAccepted, good[i].status, "a create batched with %q: %s", tc.name, good[i].raw)
	}
	after := b.counts(t)
	assert.Equal(t, before["managed_tx"]+len(bad), after["managed_tx"], "only the good creates are written")
}

func withMetadata(m map[string]any, raw string) map[string]any {
	m["metadata"] = json.RawMessage(raw)
	return m
}

// TestIssue46_LocationBehindMount: a create's Location leads to the
// transaction wherever the API is mounted, at the root or under /Api as
// the local stack serves it.
func TestIssue46_LocationBehindMount(t *testing.T) {
	t.Parallel()
	for _, mount := range []string{"", "/Api"} {
		b := setup(t, 0)
		b.mount = mount
		inst := b.newInstance(t, "mounted", b.db.URL)
		r := b.create(t, inst, transfer(signers(1)[0], 1, "loc-1"))
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
		loc := r.header.Get("Location")
		require.NotEmpty(t, loc)
		base, err := url.Parse(inst.url + "/v1/transactions")
		require.NoError(t, err)
		ref, err := url.Parse(loc)
		require.NoError(t, err)
		resp, err := b.client.Get(base.ResolveReference(ref).String())
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "mount %q: %s leads to the transaction: %s", mount, loc, body)
		assert.Contains(t, string(body), r.tx.ID)
	}
}
