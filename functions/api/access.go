package api

import (
	"strings"

	"github.com/txfence/txfence/shared/txm"
)

// access is who may call a route: the roles the guard lets through, and
// what a principal holding only one role gets, which is docs/api.md's access
// table (accessTable renders it; a test checks both docs/api.md and the
// behaviour against it).
type access struct {
	// roles are the roles of which the caller's policy must grant one
	// (none: a public route).
	roles []txm.Role
	// sender, reader, admin and approver say what a principal whose policy
	// grants only that role gets, on a signer its policy names: cellYes,
	// cellOwn, cellRole, cellEvery or cellNotApprover.
	sender, reader, admin, approver string
	// outside says what a caller the route admits gets for a signer its
	// policy does not name: cell404, cellSigner, cellLeftOut or cellNone.
	outside string
}

// The access table's cells.
const (
	cellYes     = "yes"
	cellOwn     = "own"          // the caller's own transactions; another's are 404 / left out
	cellRole    = "403 `role`"   // refused by the guard, whatever the target
	cellEvery   = "every signer" // only a policy of every signer
	cell404     = "404"          // as if it did not exist
	cellSigner  = "403 `signer`" // refused, naming the rule
	cellLeftOut = "left out"     // absent from the answer
	cellNone    = "—"            // no signer involved
	// cellNotApprover: refused unless the transaction's rule names the
	// caller, or the role the caller holds.
	cellNotApprover = "403 `not-an-approver`"
)

// metricsAccess is GET /metrics: every signer's numbers, so only for an
// admin of every signer.
var metricsAccess = access{roles: []txm.Role{txm.RoleAdmin}, sender: cellRole, reader: cellRole, admin: cellEvery, approver: cellRole,
	outside: cellSigner}

// accessRow is one row of the access table.
type accessRow struct {
	route string
	a     access
}

// accessRows are the guarded routes, in the order of routes, then
// GET /metrics.
func accessRows() []accessRow {
	var out []accessRow
	for _, rt := range routes {
		if len(rt.access.roles) > 0 {
			out = append(out, accessRow{rt.method + " " + rt.path, rt.access})
		}
	}
	return append(out, accessRow{"GET /metrics", metricsAccess})
}

// accessTable is docs/api.md's access table, in Markdown.
func accessTable() string {
	var b strings.Builder
	b.WriteString("| route | sender | reader | admin | approver | a signer outside the caller's policy |\n|---|---|---|---|---|---|\n")
	for _, r := range accessRows() {
		b.WriteString("| `" + r.route + "` | " + r.a.sender + " | " + r.a.reader + " | " + r.a.admin + " | " + r.a.approver + " | " +
			r.a.outside + " |\n")
	}
	return b.String()
}
