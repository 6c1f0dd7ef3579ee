package rpcproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// request is one JSON-RPC call of an HTTP request.
type request struct {
	raw    json.RawMessage // as received
	id     json.RawMessage // nil for a notification
	method string
	params json.RawMessage
}

// response is a JSON-RPC response the proxy makes up.
type response struct {
	Version string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

// reply is the node's answer to a forwarded HTTP request.
type reply struct {
	status      int
	contentType string
	body        []byte
}

// serve handles one HTTP request: records its calls, applies the rules and
// forwards what is left to the node.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		http.Error(w, "rpcproxy: closed", http.StatusServiceUnavailable)
		return
	}
	defer p.handlers.Done()

	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "rpcproxy: read request: "+err.Error(), http.StatusBadRequest)
		return
	}
	reqs, batch := parse(body)
	if len(reqs) == 0 { // not JSON-RPC the proxy understands: pass it on
		p.relay(w, r, body)
		return
	}
	defer p.pass(reqs)()
	calls, faults := p.resolve(reqs)

	var delay time.Duration
	var whole *Fault // Drop or HTTPStatus: answers the whole HTTP request
	for _, f := range faults {
		if f == nil {
			continue
		}
		delay = max(delay, f.Delay)
		switch {
		case f.Drop && (whole == nil || !whole.Drop): // a Drop beats an HTTPStatus
			whole = f
		case f.HTTPStatus != 0 && whole == nil:
			whole = f
		}
	}
	if whole != nil {
		p.markFaulted(calls, func(int) bool { return true })
	} else {
		p.markFaulted(calls, func(i int) bool { return faults[i].answers() })
	}
	if !sleep(r.Context(), delay) {
		return
	}

	switch {
	case whole != nil && whole.Drop:
		drop(w)
	case whole != nil:
		status := whole.HTTPStatus
		if status < 100 || status > 999 {
			status = http.StatusInternalServerError
		}
		http.Error(w, fmt.Sprintf("rpcproxy: injected HTTP %d", whole.HTTPStatus), status)
	case !anyAnswers(faults) && p.lag() == 0:
		p.relay(w, r, body)
	case !batch && faults[0].answers():
		if reqs[0].id == nil { // a notification gets no answer
			w.WriteHeader(http.StatusOK)
			return
		}
		writeJSON(w, answer(reqs[0], faults[0]))
	default:
		p.serveBatch(w, r, reqs, faults, batch)
	}
}

// serveBatch answers a request some of whose calls are answered by faults,
// or that a lagging proxy answers: the others go to the node as a smaller
// batch, and the answers come back in the order of the calls (one answer,
// not a list, for a request that was not a batch).
func (p *Proxy) serveBatch(w http.ResponseWriter, r *http.Request, reqs []request, faults []*Fault, batch bool) {
	var forward []request
	for i, req := range reqs {
		if !faults[i].answers() {
			forward = append(forward, req)
		}
	}
	byID := make(map[string][]json.RawMessage)
	if len(forward) > 0 {
		answers, rep, err := p.exchange(r, forward)
		if err != nil {
			upstreamFailed(w, r, err)
			return
		}
		if answers == nil {
			rep.write(w) // nothing to merge into: the node's answer as it is
			return
		}
		for _, a := range answers {
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(a, &m) == nil {
				k := idKey(m.ID)
				byID[k] = append(byID[k], a)
			}
		}
	}
	out := make([]json.RawMessage, 0, len(reqs))
	for i, req := range reqs {
		switch k := idKey(req.id); {
		case req.id == nil: // a notification gets no answer
		case faults[i].answers():
			out = append(out, answer(req, faults[i]))
		case len(byID[k]) > 0:
			out = append(out, byID[k][0])
			byID[k] = byID[k][1:]
		default:
			out = append(out, answer(req, &Fault{RPCError: &RPCError{
				Code: -32603, Message: "rpcproxy: no answer from upstream",
			}}))
		}
	}
	switch {
	case batch:
		writeJSON(w, out)
	case len(out) == 0: // a notification
		w.WriteHeader(http.StatusOK)
	default:
		writeJSON(w, out[0])
	}
}

// exchange sends reqs to the node as one batch, or answers them as a
// lagging node (Lag), and returns the answers; nil answers with the node's
// reply when that reply is not a list of answers.
func (p *Proxy) exchange(r *http.Request, reqs []request) ([]json.RawMessage, reply, error) {
	if by := p.lag(); by > 0 {
		answers, err := p.exchangeLagged(r, reqs, by)
		return answers, reply{}, err
	}
	raws := make([]json.RawMessage, len(reqs))
	for i, req := range reqs {
		raws[i] = req.raw
	}
	body, err := json.Marshal(raws)
	if err != nil {
		return nil, reply{}, fmt.Errorf("encode batch: %w", err)
	}
	rep, err := p.forward(r, body)
	if err != nil {
		return nil, reply{}, err
	}
	var answers []json.RawMessage
	if rep.status != http.StatusOK || json.Unmarshal(rep.body, &answers) != nil {
		return nil, rep, nil
	}
	return answers, rep, nil
}

// relay forwards body to the node and passes its answer back.
func (p *Proxy) relay(w http.ResponseWriter, r *http.Request, body []byte) {
	rep, err := p.forward(r, body)
	if err != nil {
		upstreamFailed(w, r, err)
		return
	}
	rep.write(w)
}

// hopHeaders are not passed on to the node. Accept-Encoding is left to the
// transport, so that answers arrive decoded.
var hopHeaders = []string{
	"Accept-Encoding", "Connection", "Content-Length", "Keep-Alive",
	"Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// forward sends body to the node with the headers of r.
func (p *Proxy) forward(r *http.Request, body []byte) (reply, error) {
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream, bytes.NewReader(body))
	if err != nil {
		return reply{}, fmt.Errorf("forward: %w", err)
	}
	req.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return reply{}, fmt.Errorf("forward: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, fmt.Errorf("forward: read answer: %w", err)
	}
	return reply{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type"), body: b}, nil
}

func (rep reply) write(w http.ResponseWriter) {
	if rep.contentType != "" {
		w.Header().Set("Content-Type", rep.contentType)
	}
	w.WriteHeader(rep.status)
	_, _ = w.Write(rep.body)
}

// upstreamFailed answers 502, unless the client has gone.
func upstreamFailed(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	http.Error(w, "rpcproxy: "+err.Error(), http.StatusBadGateway)
}

// parse splits body into its calls; nil when it is not JSON-RPC.
func parse(body []byte) (reqs []request, batch bool) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	batch = len(trimmed) > 0 && trimmed[0] == '['
	var raws []json.RawMessage
	if !batch {
		raws = []json.RawMessage{body}
	} else if err := json.Unmarshal(body, &raws); err != nil {
		return nil, false
	}
	for _, raw := range raws {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.Method == "" {
			return nil, false
		}
		reqs = append(reqs, request{raw: raw, id: m.ID, method: m.Method, params: m.Params})
	}
	return reqs, batch
}

// answer is the JSON-RPC response f makes for req.
func answer(req request, f *Fault) json.RawMessage {
	resp := response{Version: "2.0", ID: req.id}
	switch {
	case f.RPCError != nil:
		resp.Error = f.RPCError
	case f.Swallow:
		h, err := TxHashOf(req.params)
		if err != nil {
			resp.Error = &RPCError{Code: -32602, Message: "rpcproxy: swallow: " + err.Error()}
			break
		}
		resp.Result, _ = json.Marshal(h) // a common.Hash always encodes
	default:
		resp.Result = json.RawMessage("null")
	}
	b, err := json.Marshal(resp)
	if err != nil { // Data that does not encode
		resp.Error = &RPCError{Code: -32603, Message: "rpcproxy: encode fault: " + err.Error()}
		b, _ = json.Marshal(resp)
	}
	return b
}

// idKey is the compact form of a JSON-RPC id, to match answers to calls.
func idKey(id json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, id); err != nil {
		return string(id)
	}
	return buf.String()
}

func anyAnswers(faults []*Fault) bool {
	for _, f := range faults {
		if f.answers() {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "rpcproxy: encode answer: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// sleep waits for d; false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// drop closes the connection without answering.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler) // the server closes the connection
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}
