package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/testsupport"
	"github.com/txfence/txfence/shared/txm"
)

// unknownTx is a transaction id no test creates.
const unknownTx = "0190f7a2-0000-7000-8000-000000000000"

// policyVersion is the principal's latest policy version (0: none).
func (b *bundle) policyVersion(t testing.TB, principal string) int {
	t.Helper()
	var v int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(max(version), 0) FROM principal_policy WHERE principal = $1`, principal).Scan(&v))
	return v
}

// auditCount counts audit rows of principal with outcome (LIKE pattern).
func (b *bundle) auditCount(t testing.TB, principal, outcome string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log WHERE ($1 = '' OR principal = $1) AND outcome LIKE $2`, principal, outcome).Scan(&n))
	return n
}

// sameNotFound asserts r is the very 404 a transaction that does not exist
// gets: nothing in it tells the two apart.
func sameNotFound(t *testing.T, want, r response, msg string) {
	t.Helper()
	require.Equal(t, http.StatusNotFound, want.status, "the reference answer: %s", want.raw)
	assert.Equal(t, http.StatusNotFound, r.status, "%s: %s", msg, r.raw)
	assert.Equal(t, want.prob, r.prob, "%s: the answer of a transaction that does not exist", msg)
}

// TestIssue44_AdminScope: an admin whose policy names signer A cannot act
// on a transaction of signer B (resubmit, replace, cancel answer 404, as a
// read of it does: it cannot tell it from one that does not exist), nor
// grant itself or anyone B or every signer, nor rewrite or read a wider
// principal's policy (403 rule signer). None of it writes an action row,
// an 'ok' audit row or a policy version; each refusal is audited. Within A
// the same admin acts and writes policies.
func TestIssue44_AdminScope(t *testing.T) {
	t.Parallel()
	s := setupSecure(t, 1)
	inst := s.insts[0]
	ss := signers(2)
	a, bSigner := ss[0], ss[1]
	const (
		adminA   = "ops-a@proj.iam.gserviceaccount.com"
		treasury = "treasury@proj.iam.gserviceaccount.com"
		newbie   = "newbie@proj.iam.gserviceaccount.com"
	)
	s.put(t, txm.Policy{Principal: adminA, Roles: []txm.Role{txm.RoleAdmin}, Signers: []common.Address{a}})
	s.put(t, txm.Policy{Principal: treasury, Roles: []txm.Role{txm.RoleSender}, AllSigners: true})
	txA := s.create(t, inst, transfer(a, 1, ""), s.bearer(treasury)...)
	require.Equal(t, http.StatusAccepted, txA.status, "%s", txA.raw)
	txB := s.create(t, inst, transfer(bSigner, 1, ""), s.bearer(treasury)...)
	require.Equal(t, http.StatusAccepted, txB.status, "%s", txB.raw)

	as := s.bearer(adminA)
	before := s.rowCounts(t)
	okAudits := s.auditCount(t, "", "ok")
	versions := map[string]int{adminA: s.policyVersion(t, adminA), treasury: s.policyVersion(t, treasury), newbie: 0}

	// Actions on B's transaction: the answer of a transaction that does
	// not exist, to the byte.
	for _, kind := range []string{"resubmit", "replace", "cancel"} {
		body := map[string]any{"actionId": "scope-" + kind, "reason": "out of scope"}
		ghost := s.do(t, inst, http.MethodPost, "/v1/transactions/"+unknownTx+"/"+kind, body, as...)
		r := s.do(t, inst, http.MethodPost, "/v1/transactions/"+txB.tx.ID+"/"+kind, body, as...)
		sameNotFound(t, ghost, r, kind+" of another signer's transaction")
		// Without a reason (which the use case would refuse 422) the
		// answer is still that 404: nothing about the body is checked
		// for a transaction the admin may not see.
		r = s.do(t, inst, http.MethodPost, "/v1/transactions/"+txB.tx.ID+"/"+kind, map[string]any{"actionId": "x"}, as...)
		sameNotFound(t, ghost, r, kind+" without a reason")
	}
	ghost := s.do(t, inst, http.MethodGet, "/v1/transactions/"+unknownTx, nil, as...)
	sameNotFound(t, ghost, s.do(t, inst, http.MethodGet, "/v1/transactions/"+txB.tx.ID, nil, as...), "a read, the same rule")

	// Policy writes beyond its signers.
	for name, c := range map[string]struct {
		principal string
		body      map[string]any
	}{
		"itself on B":           {adminA, map[string]any{"roles": []string{"admin"}, "signers": []string{a.Hex(), bSigner.Hex()}}},
		"itself on every":       {adminA, map[string]any{"roles": []string{"admin"}, "signers": []string{"*"}}},
		"a new principal on B":  {newbie, map[string]any{"roles": []string{"sender"}, "signers": []string{bSigner.Hex()}}},
		"a new one on every":    {newbie, map[string]any{"roles": []string{"reader"}, "signers": []string{"*"}}},
		"narrowing a wider one": {treasury, map[string]any{"roles": []string{"sender"}, "signers": []string{a.Hex()}}},
	} {
		r := s.do(t, inst, http.MethodPut, "/v1/principals/"+c.principal+"/policy", c.body, as...)
		assert.Equal(t, http.StatusForbidden, r.status, "%s: %s", name, r.raw)
		assert.Equal(t, txm.RuleSigner, r.prob.Rule, name)
	}
	r := s.do(t, inst, http.MethodGet, "/v1/principals/"+treasury+"/policy", nil, as...)
	assert.Equal(t, http.StatusForbidden, r.status, "reading a wider policy: %s", r.raw)
	assert.NotContains(t, strings.ToLower(string(r.raw)), strings.ToLower(bSigner.Hex()[2:]), "nothing of the other policy")

	// Nothing changed.
	assert.Equal(t, before, s.rowCounts(t), "no action row, nothing else")
	var actions int
	require.NoError(t, s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tx_action WHERE tx_id = $1`, txB.tx.ID).Scan(&actions))
	assert.Zero(t, actions)
	assert.Equal(t, okAudits, s.auditCount(t, "", "ok"), "no audit row says ok")
	for p, v := range versions {
		assert.Equal(t, v, s.policyVersion(t, p), "the policy of %s is unchanged", p)
	}
	assert.Equal(t, 3*2+5+1, s.auditCount(t, adminA, "refused:signer"), "each refusal is audited")

	// Within A the admin acts and grants; an admin of every signer grants
	// every signer.
	r = s.do(t, inst, http.MethodPost, "/v1/transactions/"+txA.tx.ID+"/cancel", map[string]any{"actionId": "in-scope", "reason": "its own signer"}, as...)
	assert.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
	r = s.do(t, inst, http.MethodPut, "/v1/principals/"+newbie+"/policy", map[string]any{"roles": []string{"sender"}, "signers": []string{a.Hex()}}, as...)
	assert.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	r = s.do(t, inst, http.MethodGet, "/v1/principals/"+newbie+"/policy", nil, as...)
	assert.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	r = s.do(t, inst, http.MethodPut, "/v1/principals/"+newbie+"/policy", map[string]any{"roles": []string{"sender"}, "signers": []string{"*"}},
		s.bearer(adminEmail)...)
	assert.Equal(t, http.StatusOK, r.status, "%s", r.raw)
}

// feedIDs reads the completions feed after seq as who and returns the
// transaction ids, in order.
func (s *secured) feedIDs(t *testing.T, who string, query string) []string {
	t.Helper()
	r := s.do(t, s.insts[0], http.MethodGet, "/v1/completions?"+query, nil, s.bearer(who)...)
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	var page completionPage
	require.NoError(t, json.Unmarshal(r.raw, &page))
	ids := []string{}
	for _, it := range page.Items {
		ids = append(ids, it.TxID)
	}
	return ids
}

// listIDs lists transactions as who and returns their ids.
func (s *secured) listIDs(t *testing.T, who, query string) []string {
	t.Helper()
	r := s.do(t, s.insts[0], http.MethodGet, "/v1/transactions?limit=500"+query, nil, s.bearer(who)...)
	require.Equal(t, http.StatusOK, r.status, "%s", r.raw)
	var page listPage
	require.NoError(t, json.Unmarshal(r.raw, &page))
	ids := []string{}
	for _, it := range page.Items {
		ids = append(ids, it.ID)
	}
	return ids
}

// TestIssue44_SenderNotReader: two senders on one signer each read their
// own transactions — the create's answer, by id, by request id, in lists,
// in the feed (from the database and from a long poll's memory) and their
// actions — and nothing of the other's, which answers exactly as a
// transaction that does not exist. A policy that grants reader too reads
// both, and so does a reader by request id as by id.
func TestIssue44_SenderNotReader(t *testing.T) {
	t.Parallel()
	s := setupSecure(t, 1)
	inst := s.insts[0]
	signer := signers(1)[0]
	const (
		one  = "payouts-one@proj.iam.gserviceaccount.com"
		two  = "payouts-two@proj.iam.gserviceaccount.com"
		both = "auditor@proj.iam.gserviceaccount.com"
	)
	s.put(t, txm.Policy{Principal: one, Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{signer}})
	s.put(t, txm.Policy{Principal: two, Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{signer}})
	s.put(t, txm.Policy{Principal: both, Roles: []txm.Role{txm.RoleSender, txm.RoleReader}, Signers: []common.Address{signer}})
	tx1 := s.create(t, inst, transfer(signer, 1, "r-1"), s.bearer(one)...)
	require.Equal(t, http.StatusAccepted, tx1.status, "%s", tx1.raw)
	tx2 := s.create(t, inst, transfer(signer, 2, "r-2"), s.bearer(two)...)
	require.Equal(t, http.StatusAccepted, tx2.status, "%s", tx2.raw)
	writeCompletion(t, s.bundle, tx1.tx.ID)
	writeCompletion(t, s.bundle, tx2.tx.ID)

	mine := map[string]response{one: tx1, two: tx2}
	theirs := map[string]response{one: tx2, two: tx1}
	for _, who := range []string{one, two} {
		as := s.bearer(who)
		own, other := mine[who].tx, theirs[who].tx
		get := func(path string) response { return s.do(t, inst, http.MethodGet, path, nil, as...) }

		r := get("/v1/transactions/" + own.ID)
		require.Equal(t, http.StatusOK, r.status, "%s reads its own by id: %s", who, r.raw)
		sameNotFound(t, get("/v1/transactions/"+unknownTx), get("/v1/transactions/"+other.ID), who+" by id")
		sameNotFound(t, get("/v1/transactions/"+unknownTx+"?include=attempts,history"),
			get("/v1/transactions/"+other.ID+"?include=attempts,history"), who+" by id with attempts and history")

		r = get("/v1/transactions?from=" + signer.Hex() + "&requestId=" + *own.RequestID)
		require.Equal(t, http.StatusOK, r.status, "%s reads its own by request id: %s", who, r.raw)
		assert.Equal(t, own.ID, r.tx.ID)
		sameNotFound(t, get("/v1/transactions?from="+signer.Hex()+"&requestId=r-none"),
			get("/v1/transactions?from="+signer.Hex()+"&requestId="+*other.RequestID), who+" by request id")

		r = get("/v1/transactions/" + own.ID + "/actions")
		assert.Equal(t, http.StatusOK, r.status, "%s reads its own actions: %s", who, r.raw)
		sameNotFound(t, get("/v1/transactions/"+unknownTx+"/actions"), get("/v1/transactions/"+other.ID+"/actions"), who+" actions")

		assert.Equal(t, []string{own.ID}, s.listIDs(t, who, ""), "%s lists its own only", who)
		assert.Equal(t, []string{own.ID}, s.listIDs(t, who, "&from="+signer.Hex()), "%s lists its own only, by signer", who)
		assert.Equal(t, []string{own.ID}, s.feedIDs(t, who, "after=0"), "%s's feed holds its own only", who)

		// The create's answer to a replay is its own, too.
		r = s.create(t, inst, transfer(signer, map[string]int64{one: 1, two: 2}[who], *own.RequestID), as...)
		assert.Equal(t, http.StatusOK, r.status, "%s replays its own: %s", who, r.raw)
		assert.Equal(t, own.ID, r.tx.ID)
	}

	// A long poll answered from the instance's memory: one waits at the
	// head, the other's outcome comes first and must not wake it with
	// that, then its own does.
	head := writeCompletion(t, s.bundle, tx2.tx.ID)
	got := make(chan []string, 1)
	latest := s.feedLatest.Load()
	go func() { got <- s.feedIDs(t, one, fmt.Sprintf("after=%d&wait=20s", head)) }()
	testsupport.Eventually(t, 20*time.Second, "the poll to wait and the listener to know the head", func() bool {
		return s.feedLatest.Load() > latest
	})
	reads := s.feedReads.Load()
	writeCompletion(t, s.bundle, tx2.tx.ID)
	testsupport.Eventually(t, 20*time.Second, "the listener to read the other's outcome", func() bool {
		return s.feedReads.Load() > reads
	})
	writeCompletion(t, s.bundle, tx1.tx.ID)
	select {
	case ids := <-got:
		assert.Equal(t, []string{tx1.tx.ID}, ids, "woken by its own outcome alone")
	case <-time.After(30 * time.Second):
		t.Fatal("the long poll did not answer")
	}

	// Sender and reader: both, everywhere.
	as := s.bearer(both)
	for _, tx := range []response{tx1, tx2} {
		r := s.do(t, inst, http.MethodGet, "/v1/transactions/"+tx.tx.ID, nil, as...)
		assert.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		r = s.do(t, inst, http.MethodGet, "/v1/transactions?from="+signer.Hex()+"&requestId="+*tx.tx.RequestID, nil, as...)
		assert.Equal(t, http.StatusOK, r.status, "%s", r.raw)
		// A reader of every signer by request id, as by id.
		r = s.do(t, inst, http.MethodGet, "/v1/transactions?from="+signer.Hex()+"&requestId="+*tx.tx.RequestID, nil, s.bearer(readerEmail)...)
		assert.Equal(t, http.StatusOK, r.status, "a reader by request id: %s", r.raw)
	}
	assert.ElementsMatch(t, []string{tx1.tx.ID, tx2.tx.ID}, s.listIDs(t, both, ""))
	assert.Subset(t, s.feedIDs(t, both, "after=0"), []string{tx1.tx.ID, tx2.tx.ID})
}

// TestIssue44_RateLimitAfterAuth: a principal with no rights on signer S
// sends 1,000 creates for S: every one is refused 403 (never 429: it spends
// nothing of S's rate) and writes nothing; then a sender of S gets the
// whole of S's burst.
func TestIssue44_RateLimitAfterAuth(t *testing.T) {
	t.Parallel()
	s := setupSecure(t, 1, func(c *config.Config) { c.Auth.SignerRatePerSecond = 1 }) // burst 2
	inst := s.insts[0]
	ss := signers(2)
	target, elsewhere := ss[0], ss[1]
	const intruder = "intruder@proj.iam.gserviceaccount.com"
	s.put(t, txm.Policy{Principal: intruder, Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{elsewhere}})
	s.put(t, txm.Policy{Principal: senderEmail, Roles: []txm.Role{txm.RoleSender}, Signers: []common.Address{target}})

	before := s.rowCounts(t)
	var forbidden, other atomic.Int64
	parallel(1000, 8, func(i int) {
		r := s.create(t, inst, transfer(target, 1, ""), s.bearer(intruder)...)
		if r.status == http.StatusForbidden && r.prob.Rule == txm.RuleSigner {
			forbidden.Add(1)
		} else {
			other.Add(1)
			t.Logf("create %d: %d %s", i, r.status, r.raw)
		}
	})
	assert.EqualValues(t, 1000, forbidden.Load(), "every create refused for the signer")
	assert.Zero(t, other.Load())
	assert.Equal(t, before, s.rowCounts(t), "the refusals wrote nothing")
	assert.Equal(t, 1000, s.auditCount(t, intruder, "refused:signer"), "each refusal audited once")

	for i := 0; i < 2; i++ {
		r := s.create(t, inst, transfer(target, 1, ""), s.bearer(senderEmail)...)
		assert.Equal(t, http.StatusAccepted, r.status, "the signer's burst is whole for its sender: %s", r.raw)
	}
	limited := false
	for i := 0; i < 10 && !limited; i++ { // 1/s: one comes soon, however slow the machine
		limited = s.create(t, inst, transfer(target, 1, ""), s.bearer(senderEmail)...).status == http.StatusTooManyRequests
	}
	assert.True(t, limited, "and then the signer's rate binds")
}

// TestIssue44_AuditOnce: an audit row names the route once — method and
// path — whether the guard refused the role or a handler the signer.
func TestIssue44_AuditOnce(t *testing.T) {
	t.Parallel()
	s := setupSecure(t, 1)
	inst := s.insts[0]
	ss := signers(2)
	const narrow = "narrow@proj.iam.gserviceaccount.com"
	s.put(t, txm.Policy{Principal: narrow, Roles: []txm.Role{txm.RoleReader}, Signers: []common.Address{ss[0]}})

	r := s.create(t, inst, transfer(ss[0], 1, ""), s.bearer(narrow)...)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.raw)
	r = s.do(t, inst, http.MethodGet, "/v1/signers/"+ss[1].Hex()+"?chainId=1337", nil, s.bearer(narrow)...)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.raw)
	r = s.do(t, inst, http.MethodGet, "/Api/v1/transactions?from="+ss[1].Hex(), nil, s.bearer(narrow)...)
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.raw)

	rows, err := s.db.Pool.Query(context.Background(), `SELECT action, target, outcome FROM audit_log WHERE principal = $1 ORDER BY id`, narrow)
	require.NoError(t, err)
	var got [][3]string
	for rows.Next() {
		var row [3]string
		require.NoError(t, rows.Scan(&row[0], &row[1], &row[2]))
		got = append(got, row)
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, [][3]string{
		{"POST /v1/transactions", "/v1/transactions", "refused:role"},
		{"GET /v1/signers/{address}", "/v1/signers/" + ss[1].Hex(), "refused:signer"},
		{"GET /v1/transactions", "/v1/transactions", "refused:signer"},
	}, got)
	twice := regexp.MustCompile(`^([A-Z]+) ([A-Z]+) `)
	var all []string
	rows, err = s.db.Pool.Query(context.Background(), `SELECT action FROM audit_log`)
	require.NoError(t, err)
	for rows.Next() {
		var a string
		require.NoError(t, rows.Scan(&a))
		all = append(all, a)
	}
	require.NoError(t, rows.Err())
	for _, a := range all {
		assert.False(t, twice.MatchString(a), "%q names a method twice", a)
	}
}

// TestAccessTable: docs/api.md's access table is the one the routes declare
// (accessTable), and every cell of it is what the API does: each route is
// called as a principal holding only that role on signer A, on its own
// transaction and another principal's (the columns), and on signer B (the
// last column).
func TestAccessTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "api.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(doc), accessTable()),
		"docs/api.md's access table is not accessTable(); after changing a route's access, paste:\n%s", accessTable())

	s := setupSecure(t, 1)
	inst := s.insts[0]
	ss := signers(2)
	a, bSigner := ss[0], ss[1]
	const (
		senderA   = "sender-a@proj.iam.gserviceaccount.com"
		readerA   = "reader-a@proj.iam.gserviceaccount.com"
		adminA    = "admin-a@proj.iam.gserviceaccount.com"
		approverA = "approver-a@proj.iam.gserviceaccount.com"
		other     = "other@proj.iam.gserviceaccount.com"
		held      = "held@proj.iam.gserviceaccount.com"
	)
	onA := []common.Address{a}
	s.put(t, txm.Policy{Principal: senderA, Roles: []txm.Role{txm.RoleSender}, Signers: onA})
	s.put(t, txm.Policy{Principal: readerA, Roles: []txm.Role{txm.RoleReader}, Signers: onA})
	s.put(t, txm.Policy{Principal: adminA, Roles: []txm.Role{txm.RoleAdmin}, Signers: onA})
	s.put(t, txm.Policy{Principal: approverA, Roles: []txm.Role{txm.RoleApprover}, Signers: onA})
	s.put(t, txm.Policy{Principal: other, Roles: []txm.Role{txm.RoleSender}, AllSigners: true})
	// Every create of held waits for more approvals of the approver role
	// than the probes give.
	s.put(t, txm.Policy{Principal: held, Roles: []txm.Role{txm.RoleSender}, AllSigners: true,
		Approvals: []txm.ApprovalRule{{Above: big.NewInt(0), Required: 5, ApproverRole: txm.RoleApprover}}})
	mk := func(who string, from common.Address) txView {
		r := s.create(t, inst, transfer(from, 1, ""), s.bearer(who)...)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
		writeCompletion(t, s.bundle, r.tx.ID)
		return r.tx
	}
	own, theirs, onB := mk(senderA, a), mk(other, a), mk(other, bSigner)
	waiting := func(from common.Address) txView {
		r := s.create(t, inst, transfer(from, 1, ""), s.bearer(held)...)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.raw)
		require.Equal(t, txm.StatePendingApproval, r.tx.State, "%s", r.raw)
		return r.tx
	}
	// One transaction waiting for approval per approval route (a rejection
	// ends it), and one of signer B.
	pending := map[string]txView{"approve": waiting(a), "reject": waiting(a)}
	pendingB := waiting(bSigner)
	as := map[string]string{"sender": senderA, "reader": readerA, "admin": adminA, "approver": approverA}

	do := func(who, method, path string, body any) response {
		return s.do(t, inst, method, path, body, s.bearer(who)...)
	}
	seen := func(r response) bool {
		return r.status < 300 || r.status == http.StatusConflict && strings.HasSuffix(r.prob.Type, "/action-not-allowed")
	}
	refused := func(r response) (string, bool) {
		if r.status == http.StatusForbidden {
			return "403 `" + r.prob.Rule + "`", true
		}
		return "", false
	}
	// byID judges a route that names a transaction: on its own and
	// another's transaction (a principal that creates none has no own).
	byID := func(who string, call func(tx txView) response) string {
		ot := call(theirs)
		if cell, ok := refused(ot); ok {
			return cell
		}
		switch {
		case seen(ot):
			return cellYes
		case ot.status != http.StatusNotFound:
			return fmt.Sprintf("%d %s", ot.status, ot.raw)
		case who != senderA || seen(call(own)):
			return cellOwn
		}
		return "neither"
	}
	// inList judges a route that answers a list of ids.
	inList := func(r response, ids []string, tx txView) string {
		if cell, ok := refused(r); ok {
			return cell
		}
		if r.status != http.StatusOK {
			return fmt.Sprintf("%d %s", r.status, r.raw)
		}
		mine, others := slices.Contains(ids, own.ID), slices.Contains(ids, theirs.ID)
		switch {
		case others:
			return cellYes
		case mine || tx.ID == "":
			return cellOwn
		}
		return "neither"
	}
	gone := func(who string, path string) string {
		ghost := do(who, http.MethodGet, strings.ReplaceAll(path, onB.ID, unknownTx), nil)
		r := do(who, http.MethodGet, path, nil)
		if r.status == http.StatusNotFound && reflect.DeepEqual(r.prob, ghost.prob) {
			return cell404
		}
		if cell, ok := refused(r); ok {
			return cell
		}
		return fmt.Sprintf("%d %s", r.status, r.raw)
	}
	txIDs := func(r response) []string {
		var page listPage
		_ = json.Unmarshal(r.raw, &page)
		var ids []string
		for _, it := range page.Items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	feedIDs := func(r response) []string {
		var page completionPage
		_ = json.Unmarshal(r.raw, &page)
		var ids []string
		for _, it := range page.Items {
			ids = append(ids, it.TxID)
		}
		return ids
	}
	signerAddrs := func(r response) []string {
		var page signerPageView
		_ = json.Unmarshal(r.raw, &page)
		var out []string
		for _, it := range page.Items {
			out = append(out, it.Address)
		}
		return out
	}
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("probe-%d", n) }
	action := func(kind string) (func(who string) string, func(who string) string) {
		return func(who string) string {
				return byID(who, func(tx txView) response {
					return do(who, http.MethodPost, "/v1/transactions/"+tx.ID+"/"+kind, map[string]any{"actionId": fresh(), "reason": "probe"})
				})
			}, func(who string) string {
				ghost := do(who, http.MethodPost, "/v1/transactions/"+unknownTx+"/"+kind, map[string]any{"actionId": fresh(), "reason": "probe"})
				r := do(who, http.MethodPost, "/v1/transactions/"+onB.ID+"/"+kind, map[string]any{"actionId": fresh(), "reason": "probe"})
				if r.status == http.StatusNotFound && reflect.DeepEqual(r.prob, ghost.prob) {
					return cell404
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			}
	}
	type probe struct{ in, out func(who string) string }
	probes := map[string]probe{
		"POST /v1/transactions": {
			in: func(who string) string {
				r := do(who, http.MethodPost, "/v1/transactions", transfer(a, 1, ""))
				if cell, ok := refused(r); ok {
					return cell
				}
				if r.status == http.StatusAccepted {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				r := do(who, http.MethodPost, "/v1/transactions", transfer(bSigner, 1, ""))
				cell, _ := refused(r)
				return cell
			},
		},
		"GET /v1/transactions": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/transactions?limit=500", nil)
				list := inList(r, txIDs(r), own)
				byRequest := byID(who, func(tx txView) response {
					return do(who, http.MethodGet, "/v1/transactions?from="+a.Hex()+"&requestId="+*tx.RequestID, nil)
				})
				if list != byRequest {
					return "list " + list + ", by request id " + byRequest
				}
				return list
			},
			out: func(who string) string {
				named, _ := refused(do(who, http.MethodGet, "/v1/transactions?from="+bSigner.Hex(), nil))
				byRequest, _ := refused(do(who, http.MethodGet, "/v1/transactions?from="+bSigner.Hex()+"&requestId="+*onB.RequestID, nil))
				all := do(who, http.MethodGet, "/v1/transactions?limit=500", nil)
				if named != byRequest || all.status != http.StatusOK || slices.Contains(txIDs(all), onB.ID) {
					return fmt.Sprintf("named %s, by request id %s, unnamed %d %v", named, byRequest, all.status, txIDs(all))
				}
				return named + " when named, else " + cellLeftOut
			},
		},
		"GET /v1/transactions/{id}": {
			in: func(who string) string {
				return byID(who, func(tx txView) response { return do(who, http.MethodGet, "/v1/transactions/"+tx.ID, nil) })
			},
			out: func(who string) string { return gone(who, "/v1/transactions/"+onB.ID) },
		},
		"GET /v1/transactions/{id}/actions": {
			in: func(who string) string {
				return byID(who, func(tx txView) response { return do(who, http.MethodGet, "/v1/transactions/"+tx.ID+"/actions", nil) })
			},
			out: func(who string) string { return gone(who, "/v1/transactions/"+onB.ID+"/actions") },
		},
		"GET /v1/signers": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/signers?limit=500", nil)
				if cell, ok := refused(r); ok {
					return cell
				}
				if r.status == http.StatusOK && slices.Contains(signerAddrs(r), txm.CanonicalAddress(a)) {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				r := do(who, http.MethodGet, "/v1/signers?limit=500", nil)
				if r.status == http.StatusOK && !slices.Contains(signerAddrs(r), txm.CanonicalAddress(bSigner)) {
					return cellLeftOut
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
		},
		"GET /v1/signers/{address}": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/signers/"+a.Hex(), nil)
				if cell, ok := refused(r); ok {
					return cell
				}
				if r.status == http.StatusOK {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				cell, _ := refused(do(who, http.MethodGet, "/v1/signers/"+bSigner.Hex(), nil))
				return cell
			},
		},
		"GET /v1/me": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/me", nil)
				if r.status == http.StatusOK && strings.Contains(string(r.raw), who) {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
		},
		"GET /v1/chains": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/chains", nil)
				if r.status == http.StatusOK && strings.Contains(string(r.raw), `"chainId"`) {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
		},
		"GET /v1/completions": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/completions?after=0&limit=1000", nil)
				return inList(r, feedIDs(r), own)
			},
			out: func(who string) string {
				r := do(who, http.MethodGet, "/v1/completions?after=0&limit=1000", nil)
				if r.status == http.StatusOK && !slices.Contains(feedIDs(r), onB.ID) {
					return cellLeftOut
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
		},
		"GET /v1/principals/{principal}/policy": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/v1/principals/"+senderA+"/policy", nil)
				if cell, ok := refused(r); ok {
					return cell
				}
				if r.status == http.StatusOK {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				cell, _ := refused(do(who, http.MethodGet, "/v1/principals/"+other+"/policy", nil))
				return cell
			},
		},
		"PUT /v1/principals/{principal}/policy": {
			in: func(who string) string {
				r := do(who, http.MethodPut, "/v1/principals/"+fresh()+"@example.com/policy", map[string]any{"roles": []string{"reader"}, "signers": []string{a.Hex()}})
				if cell, ok := refused(r); ok {
					return cell
				}
				if r.status == http.StatusOK {
					return cellYes
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				onB, _ := refused(do(who, http.MethodPut, "/v1/principals/"+fresh()+"@example.com/policy", map[string]any{"roles": []string{"reader"}, "signers": []string{bSigner.Hex()}}))
				every, _ := refused(do(who, http.MethodPut, "/v1/principals/"+fresh()+"@example.com/policy", map[string]any{"roles": []string{"reader"}, "signers": []string{"*"}}))
				wider, _ := refused(do(who, http.MethodPut, "/v1/principals/"+other+"/policy", map[string]any{"roles": []string{"sender"}, "signers": []string{a.Hex()}}))
				if onB != every || onB != wider {
					return fmt.Sprintf("B %s, every %s, a wider one %s", onB, every, wider)
				}
				return onB
			},
		},
		"GET /metrics": {
			in: func(who string) string {
				r := do(who, http.MethodGet, "/metrics", nil)
				if cell, ok := refused(r); ok && cell == cellRole {
					return cell
				}
				if all := s.do(t, inst, http.MethodGet, "/metrics", nil, s.bearer(adminEmail)...); all.status == http.StatusOK && r.status == http.StatusForbidden {
					return cellEvery
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				cell, _ := refused(do(who, http.MethodGet, "/metrics", nil))
				return cell
			},
		},
	}
	for _, kind := range []string{"resubmit", "replace", "cancel"} {
		in, out := action(kind)
		probes["POST /v1/transactions/{id}/"+kind] = probe{in: in, out: out}
	}
	for _, kind := range []string{"approve", "reject"} {
		body := map[string]any{"reason": "probe"}
		if kind == "approve" {
			body = map[string]any{"comment": "probe"}
		}
		probes["POST /v1/transactions/{id}/"+kind] = probe{
			in: func(who string) string {
				r := do(who, http.MethodPost, "/v1/transactions/"+pending[kind].ID+"/"+kind, body)
				switch {
				case r.status == http.StatusOK:
					return cellYes
				case r.status == http.StatusForbidden && r.prob.Rule != "":
					return "403 `" + r.prob.Rule + "`"
				case r.status == http.StatusForbidden:
					return "403 `" + strings.TrimPrefix(r.prob.Type, problemBase) + "`"
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
			out: func(who string) string {
				ghost := do(who, http.MethodPost, "/v1/transactions/"+unknownTx+"/"+kind, body)
				r := do(who, http.MethodPost, "/v1/transactions/"+pendingB.ID+"/"+kind, body)
				if r.status == http.StatusNotFound && reflect.DeepEqual(r.prob, ghost.prob) {
					return cell404
				}
				return fmt.Sprintf("%d %s", r.status, r.raw)
			},
		}
	}

	for _, row := range accessRows() {
		p, ok := probes[row.route]
		if !assert.True(t, ok, "%s has no probe: add one", row.route) {
			continue
		}
		for _, col := range []struct{ role, want string }{{"sender", row.a.sender}, {"reader", row.a.reader}, {"admin", row.a.admin},
			{"approver", row.a.approver}} {
			assert.Equal(t, col.want, p.in(as[col.role]), "%s as a %s of signer A", row.route, col.role)
			if col.want == cellRole || row.a.outside == cellNone {
				continue
			}
			assert.Equal(t, row.a.outside, p.out(as[col.role]), "%s as a %s of signer A, on signer B", row.route, col.role)
		}
	}
}
