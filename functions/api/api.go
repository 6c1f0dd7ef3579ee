// Package api is the Api function: the HTTPS API behind the load balancer.
// It decodes requests, calls the use cases in shared/app, and maps outcomes
// to HTTP: 202 created, 200 replay, 409 conflict, 400/422 bad input (nothing
// written), 503 with Retry-After when the database or chain is unavailable.
// Errors are application/problem+json.
package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/txfence/txfence/shared/app"
	"github.com/txfence/txfence/shared/config"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/metrics"
	"github.com/txfence/txfence/shared/txm"
)

// Deps is what the handler needs; functions/internal builds it from the
// environment in deployment, tests build it directly.
type Deps struct {
	Config config.Config
	// Auth authenticates callers; Policies says what each may do.
	Auth     txm.Authenticator
	Policies *app.Policies
	// PolicyStore is where admins change policies.
	PolicyStore txm.PolicyStore
	// Create is *app.ShardedCreate, which sends each request to its
	// signer's shard; Queries and ActionLog read every shard
	// (*app.ShardedQueries). Tests may give one store's use cases.
	Create  Creator
	Queries txm.TxQueries
	// Completions serves the feed of reported outcomes: every shard's,
	// merged under a cursor naming each (app.OneDatabase's one shard: its
	// feed and its numeric cursor).
	Completions *app.MergedCompletions
	// Actions records admin actions; ActionLog lists them.
	Actions   ActionRequester
	ActionLog txm.ActionStore
	// Operator reads the console's views: signers' lanes, attempts, history.
	Operator txm.OperatorQueries
	// Nonces reads chain nonces for the signer status; optional per chain.
	Nonces map[uint64]txm.NonceSource
	// Views read balances and heads for the console; optional per chain.
	Views map[uint64]txm.ChainView
	// Simulators tell the signer status how each chain's creates are
	// simulated; optional per chain.
	Simulators map[uint64]txm.Simulator
	// Delegations tell the signer status whether the signer's account
	// carries an EIP-7702 delegation; optional per chain.
	Delegations map[uint64]txm.DelegationReader
	// Endpoints report the health of each chain's endpoints (GET
	// /v1/chains); optional per chain.
	Endpoints map[uint64]txm.EndpointHealthReader
	Metrics   *metrics.Metrics
	Log       *slog.Logger

	// Approvals approves and rejects transactions that wait for approval.
	Approvals Approvals
}

// Creator creates transactions: *app.CreateTx or *app.ShardedCreate.
type Creator interface {
	Execute(ctx context.Context, who txm.Principal, r *txm.Request) (txm.Created, error)
}

// ActionRequester records admin actions: *app.RequestAction or
// *app.ShardedActions.
type ActionRequester interface {
	Execute(ctx context.Context, r txm.ActionRequest) (txm.Action, bool, error)
}

// Handler serves the API.
type Handler struct {
	deps   Deps
	mux    *http.ServeMux
	limits *limits
}

// route is one API operation; the OpenAPI document must list exactly these.
// access says who may call it (no roles: a public route).
type route struct {
	method, path string
	access       access
	handle       func(h *Handler, w http.ResponseWriter, r *http.Request)
}

// Who may call what. A transaction the caller may not read (txm.Policy
// CanRead) is answered as if it did not exist wherever it is named by id or
// request id, and left out of lists and the feed; a signer the caller's
// policy does not name is refused 403 where the caller names it.
var (
	sendOnly    = access{roles: []txm.Role{txm.RoleSender}, sender: cellYes, reader: cellRole, admin: cellRole, approver: cellRole, outside: cellSigner}
	readByID    = access{roles: []txm.Role{txm.RoleSender, txm.RoleReader}, sender: cellOwn, reader: cellYes, admin: cellYes, approver: cellYes, outside: cell404}
	readList    = access{roles: []txm.Role{txm.RoleSender, txm.RoleReader}, sender: cellOwn, reader: cellYes, admin: cellYes, approver: cellYes, outside: cellSigner + " when named, else " + cellLeftOut}
	readFeed    = access{roles: []txm.Role{txm.RoleSender, txm.RoleReader}, sender: cellOwn, reader: cellYes, admin: cellYes, approver: cellYes, outside: cellLeftOut}
	readSigners = access{roles: []txm.Role{txm.RoleReader}, sender: cellRole, reader: cellYes, admin: cellYes, approver: cellYes, outside: cellLeftOut}
	readSigner  = access{roles: []txm.Role{txm.RoleReader}, sender: cellRole, reader: cellYes, admin: cellYes, approver: cellYes, outside: cellSigner}
	anyRole     = access{roles: txm.Roles, sender: cellYes, reader: cellYes, admin: cellYes, approver: cellYes, outside: cellNone}
	actOnTx     = access{roles: []txm.Role{txm.RoleAdmin}, sender: cellRole, reader: cellRole, admin: cellYes, approver: cellRole, outside: cell404}
	writePolicy = access{roles: []txm.Role{txm.RoleAdmin}, sender: cellRole, reader: cellRole, admin: cellYes, approver: cellRole, outside: cellSigner}
	public      = access{}
)

var routes = []route{
	{http.MethodPost, "/v1/transactions", sendOnly, (*Handler).create},
	{http.MethodGet, "/v1/transactions", readList, (*Handler).list},
	{http.MethodGet, "/v1/transactions/{id}", readByID, (*Handler).get},
	{http.MethodGet, "/v1/signers", readSigners, (*Handler).signers},
	{http.MethodGet, "/v1/signers/{address}", readSigner, (*Handler).signer},
	{http.MethodGet, "/v1/me", anyRole, (*Handler).me},
	{http.MethodGet, "/v1/chains", anyRole, (*Handler).chains},
	{http.MethodGet, "/v1/completions", readFeed, (*Handler).completions},
	{http.MethodPost, "/v1/transactions/{id}/resubmit", actOnTx, actionRoute(txm.ActionResubmit)},
	{http.MethodPost, "/v1/transactions/{id}/replace", actOnTx, actionRoute(txm.ActionReplace)},
	{http.MethodPost, "/v1/transactions/{id}/cancel", actOnTx, actionRoute(txm.ActionCancelTx)},
	{http.MethodGet, "/v1/transactions/{id}/actions", readByID, (*Handler).actions},
	{http.MethodPost, "/v1/transactions/{id}/approve", decideOn, (*Handler).approve},
	{http.MethodPost, "/v1/transactions/{id}/reject", decideOn, (*Handler).reject},
	{http.MethodGet, "/v1/principals/{principal}/policy", writePolicy, (*Handler).getPolicy},
	{http.MethodPut, "/v1/principals/{principal}/policy", writePolicy, (*Handler).putPolicy},
	{http.MethodGet, "/v1/openapi.json", public, (*Handler).openapi},
}

// NewHandler returns the API handler.
func NewHandler(d Deps) (*Handler, error) {
	if d.Auth == nil || d.Policies == nil || d.PolicyStore == nil || d.Create == nil || d.Queries == nil ||
		d.Completions == nil || d.Actions == nil || d.ActionLog == nil || d.Operator == nil || d.Log == nil || d.Approvals == nil {
		return nil, errors.New("new api handler: auth, policies, create, queries, completions, actions, operator, approvals and logger are required")
	}
	h := &Handler{deps: d, mux: http.NewServeMux(), limits: newLimits(d.Config.Auth)}
	for _, rt := range routes {
		pattern := rt.method + " " + rt.path
		h.mux.HandleFunc(pattern, h.traced(pattern, h.guard(rt.access.roles, rt.handle)))
	}
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h.mux.HandleFunc("GET /metrics", h.guard(metricsAccess.roles, (*Handler).metrics))
	h.mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		// Relative, so that it stays under /Api where the function server
		// mounts the API (http.Redirect would resolve it against the
		// stripped path).
		w.Header().Set("Location", "console/")
		w.WriteHeader(http.StatusMovedPermanently)
	})
	h.mux.HandleFunc("GET /console/{file...}", h.serveConsole)
	h.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, notFound("no route for "+r.Method+" "+r.URL.Path))
	})
	return h, nil
}

// ServeHTTP serves the API at / or under /Api (how the function server
// mounts it when all functions share one port).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rest, ok := strings.CutPrefix(r.URL.Path, "/Api"); ok && (rest == "" || rest[0] == '/') {
		r2 := r.Clone(r.Context())
		r2.URL.Path = rest
		r2.URL.RawPath = ""
		r = r2
	}
	// The caller's trace (traceparent, or X-Cloud-Trace-Context from
	// Google's front ends), continued by this request's spans and named in
	// its log lines.
	if ctx := metrics.Extract(r.Context(), r.Header); ctx != r.Context() {
		r = r.WithContext(ctx)
	}
	h.mux.ServeHTTP(w, r)
}

// maxBody bounds a create body: the data limit in hex plus room for the rest.
func (h *Handler) maxBody() int64 { return int64(h.deps.Config.MaxDataBytes)*2 + 64*1024 }

func (h *Handler) create(w http.ResponseWriter, r *http.Request) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeProblem(w, probUnsupportedMedia.problem("send application/json"))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.maxBody()))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeProblem(w, probTooLarge.problem("the body exceeds "+strconv.FormatInt(tooBig.Limit, 10)+" bytes"))
			return
		}
		writeProblem(w, badRequest("could not read the body"))
		return
	}
	req, p := decodeCreate(body, strings.TrimSpace(r.Header.Get("Idempotency-Key")), h.deps.Config)
	if p != nil {
		h.deps.Metrics.TxCreate(r.Context(), "invalid", 1)
		writeProblem(w, *p)
		return
	}
	c := callerOf(r)
	if _, ok := h.deps.Config.Signer(req.From); ok {
		// Authorized first, so that a principal without rights on the
		// signer cannot spend the signer's rate, which others share. (An
		// unconfigured signer is refused 422 by the use case, with nothing
		// to spend.)
		if err := h.deps.Policies.AuthorizeSend(r.Context(), c.who, c.pol, req); err != nil {
			h.deps.Metrics.TxCreate(r.Context(), "forbidden", 1)
			writeProblem(w, forbidden(err))
			return
		}
		if err := h.limits.allowSigner(req.ChainID, req.From); err != nil {
			h.deps.Metrics.Refused(r.Context(), "rate_limited")
			writeProblem(w, tooManyRequests(err))
			return
		}
	}
	created, err := h.deps.Create.Execute(r.Context(), c.who, req)
	if err != nil {
		if !errors.Is(err, txm.ErrInvalid) && !errors.Is(err, txm.ErrForbidden) {
			h.deps.Log.WarnContext(r.Context(), "create failed", slog.String(logging.KeySigner, txm.CanonicalAddress(req.From)), slog.Any("error", err))
		}
		p := problemFor(err)
		if errors.Is(err, txm.ErrOutcomeUnknown) {
			p.RequestID = req.RequestID // made up when the caller gave none: retrying with it is safe
		}
		writeProblem(w, p)
		return
	}
	switch {
	case created.Outcome == txm.OutcomeCreated:
		w.Header().Set("Location", txLocation(created.Tx.ID))
		writeJSON(w, http.StatusAccepted, viewTx(created.Tx))
	case created.Outcome == txm.OutcomeReplayed:
		w.Header().Set("Location", txLocation(created.Tx.ID))
		writeJSON(w, http.StatusOK, viewTx(created.Tx))
	case created.Tx == nil: // another caller's request id: nothing of it is told
		p := probRequestIDUsed.problem("requestId " + strconv.Quote(req.RequestID) + " is already used; choose another")
		p.Errors = []fieldError{{Field: "requestId", Message: "already used"}}
		writeProblem(w, p)
	default:
		p := probRequestIDUsed.problem("requestId " + strconv.Quote(req.RequestID) + " already names transaction " + created.Tx.ID +
			" with a different payload")
		p.ExistingID = created.Tx.ID
		p.Errors = []fieldError{{Field: "requestId", Message: "already used for transaction " + created.Tx.ID}}
		writeProblem(w, p)
	}
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !isUUID(id) {
		writeProblem(w, badRequest("the id must be a UUID", fieldError{Field: "id", Message: "must be a UUID"}))
		return
	}
	attempts, history, p := includes(r)
	if p != nil {
		writeProblem(w, *p)
		return
	}
	t, err := h.readable(r, id)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	if !attempts && !history {
		writeJSON(w, http.StatusOK, viewTx(t))
		return
	}
	v, err := h.detail(r.Context(), t, attempts, history)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// readable returns the transaction id when the caller may read it
// (txm.Policy CanRead), else ErrNotFound: the caller cannot tell what it may
// not read from what does not exist.
func (h *Handler) readable(r *http.Request, id string) (*txm.Tx, error) {
	t, err := h.deps.Queries.GetTx(r.Context(), strings.ToLower(id))
	if err != nil {
		return nil, err
	}
	if c := callerOf(r); !c.pol.CanRead(c.who.ID, t) {
		return nil, fmt.Errorf("get tx %s: %w", id, txm.ErrNotFound)
	}
	return t, nil
}

// listPage is a page of transactions.
type listPage struct {
	Items      []txView `json:"items"`
	NextCursor string   `json:"nextCursor,omitempty"`
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var errs []fieldError
	bad := func(f, m string) { errs = append(errs, fieldError{Field: f, Message: m}) }
	known := map[string]bool{"from": true, "signer": true, "chainId": true, "requestId": true, "state": true,
		"createdAfter": true, "createdBefore": true, "limit": true, "cursor": true}
	for k := range q {
		if !known[k] {
			bad(k, "unknown query parameter")
		}
	}
	f := txm.TxFilter{Limit: 50}
	signerParam := q.Get("from")
	if s := q.Get("signer"); s != "" {
		if signerParam != "" && !strings.EqualFold(s, signerParam) {
			bad("signer", "differs from from")
		}
		signerParam = s
	}
	if signerParam != "" {
		a, err := txm.ParseAddress(signerParam)
		if err != nil {
			bad("from", err.Error())
		} else {
			f.Signer = &a
		}
	}
	if s := q.Get("chainId"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			bad("chainId", "must be a non-negative integer")
		}
		f.ChainID = n
	}
	if s := q.Get("state"); s != "" {
		if !txm.State(s).Valid() {
			names := make([]string, len(txm.States))
			for i, st := range txm.States {
				names[i] = string(st)
			}
			bad("state", "must be one of "+strings.Join(names, ", "))
		}
		f.State = txm.State(s)
	}
	for _, tp := range []struct {
		name string
		dst  *time.Time
	}{{"createdAfter", &f.CreatedAfter}, {"createdBefore", &f.CreatedBefore}} {
		if s := q.Get(tp.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				bad(tp.name, "must be an RFC 3339 time")
			}
			*tp.dst = t
		}
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 500 {
			bad("limit", "must be between 1 and 500")
		}
		f.Limit = n
	}
	if s := q.Get("cursor"); s != "" {
		id, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil || !isUUID(string(id)) {
			bad("cursor", "is not a cursor this API returned")
		}
		f.AfterID = string(id)
	}
	if q.Get("requestId") != "" && f.Signer == nil {
		bad("from", "is required with requestId")
	}
	if len(errs) > 0 {
		writeProblem(w, badRequest("invalid query parameters", errs...))
		return
	}
	c := callerOf(r)
	pol := c.pol
	switch {
	case f.Signer != nil && !pol.CoversSigner(*f.Signer):
		h.refuse(w, r, &txm.Refusal{Rule: txm.RuleSigner, Detail: "the caller may not read " + txm.CanonicalAddress(*f.Signer)})
		return
	case f.Signer == nil && !pol.AllSigners:
		f.Signers = append([]common.Address{}, pol.Signers...) // only the caller's signers
	}
	if pol.ReadsOwnOnly() {
		f.Principal = c.who.ID // a sender lists what it sent
	}

	if rid := q.Get("requestId"); rid != "" {
		chainID := f.ChainID
		if chainID == 0 && len(h.deps.Config.Chains) == 1 {
			chainID = h.deps.Config.Chains[0].ID
		}
		t, err := h.deps.Queries.FindByRequestID(r.Context(), chainID, *f.Signer, rid)
		if err == nil && !pol.CanRead(c.who.ID, t) {
			err = fmt.Errorf("find tx by request id: %w", txm.ErrNotFound) // as by id: not even whether it exists
		}
		if err != nil {
			writeProblem(w, problemFor(err))
			return
		}
		writeJSON(w, http.StatusOK, viewTx(t))
		return
	}
	txs, err := h.deps.Queries.ListTxs(r.Context(), f)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	page := listPage{Items: make([]txView, len(txs))}
	for i, t := range txs {
		page.Items[i] = viewTx(t)
	}
	if len(txs) == f.Limit {
		page.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(txs[len(txs)-1].ID))
	}
	writeJSON(w, http.StatusOK, page)
}

// signerView is a signer's status on the wire.
type signerView struct {
	ChainID           uint64           `json:"chainId"`
	ChainKind         config.ChainKind `json:"chainKind"`
	Address           string           `json:"address"`
	NextNonce         *uint64          `json:"nextNonce"`
	ChainPendingNonce *uint64          `json:"chainPendingNonce,omitempty"`
	ChainLatestNonce  *uint64          `json:"chainLatestNonce,omitempty"`
	// Delegated says the signer's account carries an EIP-7702 delegation
	// (its in-flight limit is the delegated one); omitted when the chain
	// could not be asked.
	Delegated *bool `json:"delegated,omitempty"`
	// Simulation is how this instance's last simulation on the chain ran;
	// omitted before its first.
	Simulation              txm.SimMethod `json:"simulation,omitempty"`
	ChainSyncedAt           *time.Time    `json:"chainSyncedAt,omitempty"`
	Allocated               int           `json:"allocated"`
	InFlight                int           `json:"inFlight"`
	Mined                   int           `json:"mined"`
	Stuck                   int           `json:"stuck"`
	OldestPendingAgeSeconds *float64      `json:"oldestPendingAgeSeconds"`
	LeaseHolder             *leaseView    `json:"leaseHolder"`
}

type leaseView struct {
	Owner     string     `json:"owner"`
	Token     int64      `json:"token"`
	ExpiresAt *time.Time `json:"expiresAt,omitempty"`
	Live      bool       `json:"live"`
}

func (h *Handler) signer(w http.ResponseWriter, r *http.Request) {
	addr, err := txm.ParseAddress(r.PathValue("address"))
	if err != nil {
		writeProblem(w, badRequest("invalid address", fieldError{Field: "address", Message: err.Error()}))
		return
	}
	chainID := uint64(0)
	if s := r.URL.Query().Get("chainId"); s != "" {
		if chainID, err = strconv.ParseUint(s, 10, 64); err != nil {
			writeProblem(w, badRequest("invalid chainId", fieldError{Field: "chainId", Message: "must be a non-negative integer"}))
			return
		}
	} else if len(h.deps.Config.Chains) == 1 {
		chainID = h.deps.Config.Chains[0].ID
	}
	if _, ok := h.deps.Config.Chain(chainID); !ok {
		writeProblem(w, badRequest("unknown chain", fieldError{Field: "chainId", Message: "is required and must be a configured chain"}))
		return
	}
	if _, ok := h.deps.Config.Signer(addr); !ok {
		writeProblem(w, notFound(txm.CanonicalAddress(addr)+" is not a configured signer"))
		return
	}
	if !callerOf(r).pol.CoversSigner(addr) {
		h.refuse(w, r, &txm.Refusal{Rule: txm.RuleSigner, Detail: "the caller may not read " + txm.CanonicalAddress(addr)})
		return
	}
	st, err := h.deps.Queries.SignerStatus(r.Context(), chainID, addr)
	if err != nil {
		writeProblem(w, problemFor(err))
		return
	}
	v := signerView{ChainID: chainID, ChainKind: h.deps.Config.Profile(chainID).Kind, Address: txm.CanonicalAddress(addr), NextNonce: st.NextNonce, ChainSyncedAt: st.ChainSyncedAt,
		Allocated: st.Allocated, InFlight: st.InFlight, Mined: st.Mined, Stuck: st.Stuck}
	if st.OldestPendingAge != nil {
		s := st.OldestPendingAge.Seconds()
		v.OldestPendingAgeSeconds = &s
	}
	if l := st.ChainLease; l != nil {
		lv := &leaseView{Owner: l.Owner, Token: l.Token, Live: st.ChainLeaseLive}
		if !l.ExpiresAt.IsZero() {
			lv.ExpiresAt = &l.ExpiresAt
		}
		v.LeaseHolder = lv
	}
	if sim := h.deps.Simulators[chainID]; sim != nil {
		v.Simulation = sim.SimulationMethod()
	}
	if ns := h.deps.Nonces[chainID]; ns != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		if n, err := ns.PendingNonce(ctx, addr); err == nil {
			v.ChainPendingNonce = &n
		}
		if n, err := ns.LatestNonce(ctx, addr); err == nil {
			v.ChainLatestNonce = &n
		}
		cancel()
	}
	if dr := h.deps.Delegations[chainID]; dr != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		if d, err := dr.Delegated(ctx, addr); err == nil {
			v.Delegated = &d
		}
		cancel()
	}
	writeJSON(w, http.StatusOK, v)
}

// metrics serves GET /metrics, Prometheus text. Its series name every
// signer, so only an admin of every signer reads them.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	if !callerOf(r).pol.AllSigners {
		h.refuse(w, r, &txm.Refusal{Rule: txm.RuleSigner, Detail: "the metrics name every signer: only a policy of every signer may read them"})
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	_ = h.deps.Metrics.WritePrometheus(r.Context(), w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
				return false
			}
		}
	}
	return true
}

func isUnavailable(err error) bool {
	return errors.Is(err, txm.ErrUnavailable) || errors.Is(err, txm.ErrFenced) || errors.Is(err, txm.ErrLeaseHeld) ||
		errors.Is(err, app.ErrChainUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// txLocation is a created transaction's Location, relative to the create's
// own URL (…/v1/transactions), so that it is right wherever the API is
// mounted: at the load balancer's root, or at /Api on the local stack.
func txLocation(id string) string { return "transactions/" + id }
