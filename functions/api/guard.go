package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/txfence/txfence/shared/auth"
	"github.com/txfence/txfence/shared/logging"
	"github.com/txfence/txfence/shared/txm"
)

// caller is the authenticated principal of a request and its policy.
type caller struct {
	who txm.Principal
	pol txm.Policy
}

type callerKey struct{}

// callerOf is the request's caller; guard put it there.
func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// guard wraps a route: it authenticates the caller (401 otherwise), applies
// the caller's own rate (429), and requires one of roles of its policy (403,
// audited). A route with no roles is public. The principal's rate is its
// own budget alone, so it is taken before the role is checked: it also
// bounds what the principal's refusals cost. What is shared with other
// principals (a signer's rate) is taken only once the call is authorized.
func (h *Handler) guard(roles []txm.Role, next func(h *Handler, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if len(roles) == 0 {
			next(h, w, r)
			return
		}
		ctx := r.Context()
		cred, err := auth.ParseAuthorization(r.Header.Get("Authorization"))
		var who txm.Principal
		if err == nil {
			who, err = h.deps.Auth.Authenticate(ctx, cred)
		}
		switch {
		case errors.Is(err, txm.ErrUnavailable):
			// Google's keys or the key store could not be read: the
			// credential may be fine.
			h.deps.Log.WarnContext(ctx, "authenticate", slog.Any("error", err))
			writeProblem(w, unavailable("authentication is unavailable"))
			return
		case err != nil:
			h.unauthenticated(w, r, err)
			return
		}
		pol, err := h.deps.Policies.For(ctx, who)
		if err != nil {
			h.deps.Log.WarnContext(ctx, "read policy", slog.String(logging.KeyPrincipal, who.ID), slog.Any("error", err))
			writeProblem(w, unavailable("the database is unavailable"))
			return
		}
		if err := h.limits.allowPrincipal(who.ID, pol); err != nil {
			h.deps.Metrics.Refused(ctx, "rate_limited")
			writeProblem(w, tooManyRequests(err))
			return
		}
		if err := pol.Require(roles...); err != nil {
			h.deps.Policies.Refused(ctx, who, routeOf(r), r.URL.Path, err)
			writeProblem(w, forbidden(err))
			return
		}
		next(h, w, r.WithContext(context.WithValue(ctx, callerKey{}, caller{who: who, pol: pol})))
	}
}

// routeOf names the request's route for logs and audit rows: its pattern,
// which holds the method already ("POST /v1/transactions").
func routeOf(r *http.Request) string {
	switch {
	case r.Pattern == "":
		return r.Method + " " + r.URL.Path
	case strings.Contains(r.Pattern, " "):
		return r.Pattern
	default:
		return r.Method + " " + r.Pattern
	}
}

// refuse answers 403 for a refusal the guard could not know of (the signer
// of the call), audited as the guard audits its own.
func (h *Handler) refuse(w http.ResponseWriter, r *http.Request, err error) {
	h.deps.Policies.Refused(r.Context(), callerOf(r).who, routeOf(r), r.URL.Path, err)
	writeProblem(w, forbidden(err))
}

// unauthenticated answers 401, logging why (never the credential).
func (h *Handler) unauthenticated(w http.ResponseWriter, r *http.Request, err error) {
	h.deps.Metrics.Refused(r.Context(), "unauthenticated")
	h.deps.Log.InfoContext(r.Context(), "unauthenticated", slog.String("route", r.Method+" "+r.URL.Path), slog.Any("error", err))
	w.Header().Set("WWW-Authenticate", `Bearer realm="txfence"`)
	writeProblem(w, probUnauthenticated.problem(
		"send a Google-signed ID token for this API, or an API key, as a bearer token in the Authorization header"))
}

// forbidden is the 403 for a refusal: it names the rule, nothing else.
func forbidden(err error) problem {
	p := probForbidden.problem("the caller's policy does not allow this; nothing was written")
	var r *txm.Refusal
	if errors.As(err, &r) {
		p.Rule, p.Detail = r.Rule, r.Detail+"; nothing was written"
	}
	return p
}

// tooManyRequests is the 429 for a rate limit, with its Retry-After.
func tooManyRequests(err error) problem {
	p := probRateLimited.problem("over the rate limit; nothing was written, retry after the Retry-After seconds")
	p.retryAfter = 1
	var rl *txm.RateLimitError
	if errors.As(err, &rl) {
		secs := int(rl.RetryAfter.Seconds() + 0.999)
		p.retryAfter = max(secs, 1)
		p.Detail = "over the " + rl.Scope + " rate limit; nothing was written, retry after " + strconv.Itoa(p.retryAfter) + "s"
	}
	return p
}
