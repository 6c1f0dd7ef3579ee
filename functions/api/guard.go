package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"

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
// the caller's rate (429), and requires role of its policy (403, audited).
// A route with no role is public.
func (h *Handler) guard(role txm.Role, next func(h *Handler, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if role == "" {
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
		if err := pol.Require(role); err != nil {
			h.deps.Policies.Refused(ctx, who, r.Method+" "+r.Pattern, r.URL.Path, err)
			writeProblem(w, forbidden(err))
			return
		}
		next(h, w, r.WithContext(context.WithValue(ctx, callerKey{}, caller{who: who, pol: pol})))
	}
}

// unauthenticated answers 401, logging why (never the credential).
func (h *Handler) unauthenticated(w http.ResponseWriter, r *http.Request, err error) {
	h.deps.Metrics.Refused(r.Context(), "unauthenticated")
	h.deps.Log.InfoContext(r.Context(), "unauthenticated", slog.String("route", r.Method+" "+r.URL.Path), slog.Any("error", err))
	w.Header().Set("WWW-Authenticate", `Bearer realm="txfence"`)
	writeProblem(w, problem{Type: problemBase + "unauthenticated", Title: "Unauthenticated", Status: http.StatusUnauthorized,
		Detail: "send a Google-signed ID token for this API, or an API key, as a bearer token in the Authorization header"})
}

// forbidden is the 403 for a refusal: it names the rule, nothing else.
func forbidden(err error) problem {
	p := problem{Type: problemBase + "forbidden", Title: "Forbidden", Status: http.StatusForbidden,
		Detail: "the caller's policy does not allow this; nothing was written"}
	var r *txm.Refusal
	if errors.As(err, &r) {
		p.Rule, p.Detail = r.Rule, r.Detail+"; nothing was written"
	}
	return p
}

// tooManyRequests is the 429 for a rate limit, with its Retry-After.
func tooManyRequests(err error) problem {
	p := problem{Type: problemBase + "rate-limited", Title: "Too many requests", Status: http.StatusTooManyRequests,
		Detail: "over the rate limit; nothing was written, retry after the Retry-After seconds", retryAfter: 1}
	var rl *txm.RateLimitError
	if errors.As(err, &rl) {
		secs := int(rl.RetryAfter.Seconds() + 0.999)
		p.retryAfter = max(secs, 1)
		p.Detail = "over the " + rl.Scope + " rate limit; nothing was written, retry after " + strconv.Itoa(p.retryAfter) + "s"
	}
	return p
}
