// txfence operator console. A static page: every piece of data comes from
// the txfence JSON API, called with the operator's own bearer token (kept in
// sessionStorage, so it is gone when the tab closes). Readers see; admins
// also get action buttons, and the server checks the role on every call.
'use strict';
(() => {
  const TOKEN_KEY = 'txfence.token';
  // The API is wherever this page is served from, minus /console/
  // ("" for the API's own host, "/Api" under the local function server).
  const base = (() => {
    const p = location.pathname;
    const i = p.lastIndexOf('/console');
    return i >= 0 ? p.slice(0, i) : '';
  })();
  const $ = (id) => document.getElementById(id);
  const ACTIONABLE = { resubmit: ['ALLOCATED', 'TRACKING', 'STUCK'], cancel: ['ALLOCATED', 'TRACKING', 'STUCK'], replace: ['TRACKING', 'STUCK'] };
  const ACTION_LABEL = { replace: 'Bump fee', cancel: 'Cancel', resubmit: 'Resubmit' };

  let me = null; // the caller: {principal, roles, admin}
  let current = null; // the view on screen: {refresh()}
  let feedGen = 0;

  // ---- helpers -----------------------------------------------------------

  const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
  const short = (a) => (a && a.length > 14 ? a.slice(0, 8) + '…' + a.slice(-6) : a || '');
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  function age(secs) {
    if (secs == null) return '—';
    const s = Math.max(0, Math.floor(secs));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm ' + (s % 60) + 's';
    if (s < 86400) return Math.floor(s / 3600) + 'h ' + Math.floor((s % 3600) / 60) + 'm';
    return Math.floor(s / 86400) + 'd ' + Math.floor((s % 86400) / 3600) + 'h';
  }

  // eth formats a wei amount (decimal string) as ether with 4 decimals.
  function eth(wei, withUnit = true) {
    if (wei == null) return '—';
    const w = BigInt(wei);
    const unit = 10n ** 18n;
    const whole = w / unit;
    const frac = ((w % unit) * 10000n) / unit;
    const s = whole.toLocaleString('en-US') + '.' + frac.toString().padStart(4, '0');
    return withUnit ? s + " ETH" : s;
  }

  function gwei(wei) {
    if (wei == null) return '—';
    const w = BigInt(wei);
    if (w > 0n && w < 1000n) return w.toString() + ' wei';
    return (Number(w) / 1e9).toLocaleString('en-US', { maximumSignificantDigits: 4 }) + ' gwei';
  }

  const when = (iso) => (iso ? new Date(iso).toLocaleString() : '—');

  function randomId() {
    const b = new Uint8Array(12);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  }

  async function api(path, opts = {}) {
    const headers = { Accept: 'application/json' };
    const tok = sessionStorage.getItem(TOKEN_KEY);
    if (tok) headers.Authorization = 'Bearer ' + tok;
    let body;
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      body = JSON.stringify(opts.body);
    }
    const resp = await fetch(base + path, { method: opts.method || 'GET', headers, body, cache: 'no-store' });
    let data = null;
    try {
      data = await resp.json();
    } catch (_) {
      /* not JSON */
    }
    if (!resp.ok) {
      const err = new Error((data && (data.detail || data.title)) || 'HTTP ' + resp.status);
      err.status = resp.status;
      err.problem = data;
      throw err;
    }
    return data;
  }

  // redraw replaces el's content, keeping keyboard focus on the same link
  // or button (by href or data-action) when it is drawn again.
  function redraw(el, html) {
    const a = document.activeElement;
    const key = a && el.contains(a) ? a.getAttribute('href') || a.dataset.action : null;
    el.innerHTML = html;
    if (key) {
      const again = el.querySelector(`[href="${CSS.escape(key)}"], [data-action="${CSS.escape(key)}"]`);
      if (again) again.focus();
    }
  }

  function notice(msg) {
    const n = $('notice');
    n.textContent = msg || '';
    n.hidden = !msg;
  }

  function failed(err) {
    if (err.status === 401) {
      notice('This API needs a credential: paste an API key (txfk_…) or a Google ID token above and press "Use token".');
    } else if (err.status === 403) {
      notice('Your credential does not allow this: ' + err.message);
    } else {
      notice(err.message);
    }
  }

  function setLive(text) {
    $('live').textContent = text;
  }

  // ---- identity ----------------------------------------------------------

  async function whoami() {
    try {
      me = await api('/v1/me');
      $('who').textContent = me.principal + ' · ' + (me.roles.length ? me.roles.join(', ') : 'no role');
      notice('');
    } catch (err) {
      me = null;
      $('who').textContent = 'not signed in';
      failed(err);
    }
  }

  // ---- effects -----------------------------------------------------------
  // What a transaction moves or allows, as its simulation at create showed
  // it (GET /v1/transactions/{id} and the list's items carry `effects`,
  // `simulation` and `simulationRevert`).

  const ZERO = '0x0000000000000000000000000000000000000000';
  const MAX_UINT256 = (1n << 256n) - 1n;
  const EFFECT_LABEL = {
    native: 'Native value',
    erc20_transfer: 'ERC-20 transfer',
    erc20_approval: 'ERC-20 approval',
    erc721_transfer: 'ERC-721 transfer',
    erc721_approval: 'ERC-721 approval',
    approval_for_all: 'Approval for all',
    erc1155_transfer: 'ERC-1155 transfer',
  };
  const SIM_LABEL = {
    simulateV1: 'eth_simulateV1 (transfers traced)',
    'call+estimate': 'eth_call and eth_estimateGas (top-level value only: this node does not trace token effects)',
  };
  const isApproval = (k) => k === 'erc20_approval' || k === 'erc721_approval' || k === 'approval_for_all';

  // addrHTML is an address shortened as elsewhere on the page, the whole of
  // it in its title, the signer's own address labelled, and the zero
  // address said in words (what it means depends on the side: zero).
  function addrHTML(a, signer, zero) {
    if (!a) return '<span class="muted">—</span>';
    if (a.toLowerCase() === ZERO && zero) return `<span class="muted" title="${esc(a)}">${esc(zero)}</span>`;
    const mine = signer && a.toLowerCase() === signer.toLowerCase();
    return `<span class="mono" title="${esc(a)}">${esc(short(a))}</span>${mine ? ' <span class="tag" title="the transaction\'s signer">signer</span>' : ''}`;
  }

  // units writes a whole number of token units with thousands separators
  // (the token's decimals are not known here).
  const units = (v) => BigInt(v).toLocaleString('en-US');

  // costHTML is t's worst-case cost as its creator's caps counted it, and
  // its two parts: the L2 execution fee bound (gas limit × fee ceiling) and
  // the L1 data fee an L2 charges beside it. Nothing for a transaction
  // created before they were recorded.
  function costHTML(t) {
    const c = t.cost;
    if (!c) return '';
    const wei = (v) => `${esc(eth(v))} <span class="muted">(${esc(units(v))} wei)</span>`;
    const exec = c.executionFee != null ? `at most ${wei(c.executionFee)}` : '<span class="muted">no bound</span>';
    return `<dt>Worst-case cost</dt><dd id="tx-cost" data-wei="${esc(c.worstCase)}">${wei(c.worstCase)} <span class="muted">value and fees, as the caps counted it</span></dd>
<dt>L2 execution fee</dt><dd id="tx-execution-fee" data-wei="${esc(c.executionFee ?? '')}">${exec} <span class="muted">gas limit × fee ceiling</span></dd>
<dt>L1 data fee</dt><dd id="tx-data-fee" data-wei="${esc(c.dataFee)}">${wei(c.dataFee)}</dd>
`;
  }

  function amountHTML(e) {
    const v = BigInt(e.amount ?? 0);
    switch (e.kind) {
      case 'native':
        return `${esc(eth(e.amount))} <span class="muted">(${esc(units(e.amount))} wei)</span>`;
      case 'erc20_approval':
        if (v === MAX_UINT256) return '<strong>unlimited</strong> <span class="muted">(2²⁵⁶−1)</span>';
        return v === 0n ? 'revoked (0)' : esc(units(e.amount)) + ' <span class="muted">units</span>';
      case 'approval_for_all':
        return v === 0n ? 'revoked' : 'granted';
      case 'erc721_transfer':
        return '1 token';
      case 'erc721_approval':
        return e.to && e.to.toLowerCase() === ZERO ? 'cleared' : '1 token';
      default:
        return esc(units(e.amount)) + ' <span class="muted">units</span>';
    }
  }

  function effectRow(e, signer) {
    const approval = isApproval(e.kind);
    return `<tr data-kind="${esc(e.kind)}"><td>${esc(EFFECT_LABEL[e.kind] || e.kind)}</td>` +
      `<td>${e.token ? addrHTML(e.token, signer) : '<span class="muted">native</span>'}</td>` +
      `<td>${addrHTML(e.from, signer, approval ? '' : '(mint)')}</td>` +
      `<td>${addrHTML(e.to, signer, approval ? '(none)' : '(burn)')}${approval ? ' <span class="muted">spender</span>' : ''}</td>` +
      `<td class="num">${amountHTML(e)}</td>` +
      `<td class="num mono">${e.tokenId != null ? esc(e.tokenId) : '<span class="muted">—</span>'}</td></tr>`;
  }

  // effectsHTML is the effects of t as a table, with how they were found
  // and, when an advisory simulation reverted, its decoded reason.
  function effectsHTML(t) {
    const how = t.simulation
      ? `Simulated at create with ${esc(SIM_LABEL[t.simulation] || t.simulation)}.`
      : t.effects
        ? 'Not simulated: a plain transfer (no data, to an address without code) moves its value and nothing else.'
        : 'Not recorded for this transaction.';
    const revert = t.simulationRevert
      ? `<p class="revert" role="note"><strong>The simulation reverted:</strong> <span class="mono">${esc(t.simulationRevert)}</span>. ` +
        `Recorded, not enforced: the creator's policy makes simulation advisory, so the transaction may fail on chain.</p>`
      : '';
    const list = t.effects || [];
    const rows = list.map((e) => effectRow(e, t.from)).join('');
    const table = rows
      ? `<table class="effects"><thead><tr><th scope="col">Effect</th><th scope="col">Token</th><th scope="col">From</th><th scope="col">To</th><th scope="col" class="num">Amount</th><th scope="col" class="num">Token id</th></tr></thead><tbody>${rows}</tbody></table>`
      : `<p class="muted">${t.simulationRevert ? 'No effects: the call reverts.' : t.effects ? 'It moves nothing.' : ''}</p>`;
    return `<p class="muted" id="tx-simulation" data-simulation="${esc(t.simulation || '')}">${how}</p>${revert}${table}`;
  }

  // effectsBrief is the effects of t in a few words a line, for a table
  // cell.
  function effectsBrief(t) {
    const list = t.effects || [];
    if (!list.length) return t.simulationRevert ? '<span class="error">reverts (advisory)</span>' : '<span class="muted">none</span>';
    return list
      .map((e) => {
        const what = e.kind === 'native' ? esc(eth(e.amount)) : `${amountHTML(e)} <span class="muted">of</span> ${addrHTML(e.token, t.from)}${e.tokenId != null ? ' #' + esc(e.tokenId) : ''}`;
        const to = isApproval(e.kind) ? 'spender ' + addrHTML(e.to, t.from, '(none)') : '→ ' + addrHTML(e.to, t.from, '(burn)');
        return `<div class="effect" data-kind="${esc(e.kind)}">${esc(EFFECT_LABEL[e.kind] || e.kind)}: ${what} ${to}</div>`;
      })
      .join('');
  }

  // ---- signers view ------------------------------------------------------

  function laneHTML(s) {
    const parts = [];
    const summary = [`final below nonce ${s.finalBelow}`];
    parts.push(`<span class="final" title="every nonce below ${s.finalBelow} is final">…${s.finalBelow > 0 ? s.finalBelow - 1 : '–'}</span>`);
    for (const t of s.lane) {
      const label = `nonce ${t.nonce} ${t.state}${t.subState ? ' (' + t.subState + ')' : ''}`;
      summary.push(label);
      parts.push(`<a class="cell s-${esc(t.state)}" href="#/tx/${esc(t.id)}" title="${esc(label)}" aria-label="${esc(label)}" data-nonce="${t.nonce}" data-state="${esc(t.state)}"></a>`);
    }
    const open = s.counts.allocated + s.counts.tracking + s.counts.mined + s.counts.stuck;
    if (open > s.lane.length) parts.push(`<span class="more">+${open - s.lane.length}</span>`);
    return `<div class="lane" title="${esc(summary.slice(0, 6).join('; '))}">${parts.join('')}</div>`;
  }

  function needHTML(s) {
    const short = s.balance != null && BigInt(s.balance) < BigInt(s.inFlightNeed);
    const bal = s.balance == null ? '<span class="muted" title="the chain did not answer in time">unknown</span>' : esc(eth(s.balance, false));
    return `<span class="${short ? 'need short' : 'need'}" title="balance / what the open unmined transactions may spend">${bal} / ${esc(eth(s.inFlightNeed))}${short ? ' <span class="badge stuck">SHORT</span>' : ''}</span>`;
  }

  function leaseHTML(l) {
    if (!l) return '<span class="muted">none</span>';
    return `<span class="mono lease" title="chain lease holder ${esc(l.owner)}">${esc(l.owner)}</span> <span class="mono">#${l.token}</span>${l.live ? '' : ' <span class="muted">(expired)</span>'}`;
  }

  // kindHTML is a chain's profile kind as a small badge.
  function kindHTML(kind) {
    if (!kind) return '';
    return `<span class="badge kind" data-kind="${esc(kind)}" title="chain profile kind">${esc(kind)}</span>`;
  }

  function signerRow(s) {
    const stuck = s.counts.stuck > 0;
    const href = `#/signer/${s.chainId}/${s.address}`;
    return `<tr class="${stuck ? 'stuck' : ''}" data-chain="${s.chainId}" data-signer="${esc(s.address)}" data-stuck="${stuck ? 1 : 0}">
<th scope="row"><a class="mono" href="${href}" title="${esc(s.address)}">${esc(short(s.address))}</a> <span class="muted" title="chain id">· ${s.chainId}</span>${stuck ? ' <span class="badge stuck">STUCK</span>' : ''}${s.configured ? '' : ' <span class="badge" title="in the database, not in this deployment\'s configuration">unconfigured</span>'} ${kindHTML(s.chainKind)}</th>
<td>${laneHTML(s)}</td>
<td class="num" data-count="final">${s.finalBelow}</td>
<td class="num" data-count="mined">${s.counts.mined}</td>
<td class="num" data-count="tracking">${s.counts.tracking}</td>
<td class="num" data-count="allocated">${s.counts.allocated}</td>
<td class="num" data-count="stuck">${s.counts.stuck}</td>
<td class="num">${age(s.oldestPendingAgeSeconds)}</td>
<td class="num">${needHTML(s)}</td>
<td>${leaseHTML(s.leaseHolder)}</td>
<td><div class="lasterr" title="${esc(s.lastError)}">${esc(s.lastError) || '<span class="muted">—</span>'}</div></td>
</tr>`;
  }

  function signersView(params) {
    const chainId = params.get('chainId') || '';
    const prefix = params.get('prefix') || '';
    const limit = params.get('limit') || '100';
    const cursors = [''];
    let page = 0;
    let nextCursor = '';
    $('view').innerHTML = `<h2>Signers</h2>
<form class="filters" id="filters" role="search">
  <label>Chain id<input id="f-chain" name="chainId" inputmode="numeric" pattern="[0-9]*" size="8" value="${esc(chainId)}"></label>
  <label>Address starts with<input id="f-prefix" name="prefix" size="24" spellcheck="false" value="${esc(prefix)}" placeholder="0x…"></label>
  <label>Per page<select id="f-limit" name="limit">${['50', '100', '200', '500'].map((n) => `<option${n === limit ? ' selected' : ''}>${n}</option>`).join('')}</select></label>
  <button type="submit">Filter</button>
</form>
<div class="pager"><button type="button" id="prev">← Previous</button><button type="button" id="next">Next →</button><span id="range" aria-live="polite"></span></div>
<div class="scroll"><table id="signers">
<caption class="muted">One row per chain and signer. Lane: final nonces, then each open nonce in order (mined, in flight, allocated, stuck). Stuck rows are marked.</caption>
<thead><tr><th scope="col">Signer</th><th scope="col">Nonce lane</th><th scope="col" class="num">Final below</th><th scope="col" class="num">Mined</th><th scope="col" class="num">In flight</th><th scope="col" class="num">Allocated</th><th scope="col" class="num">Stuck</th><th scope="col" class="num">Oldest pending</th><th scope="col" class="num">Balance / need</th><th scope="col">Lease (token)</th><th scope="col">Last error</th></tr></thead>
<tbody id="signer-rows"><tr><td colspan="11" class="muted">Loading…</td></tr></tbody>
</table></div>`;
    $('filters').addEventListener('submit', (e) => {
      e.preventDefault();
      const q = new URLSearchParams();
      if ($('f-chain').value.trim()) q.set('chainId', $('f-chain').value.trim());
      if ($('f-prefix').value.trim()) q.set('prefix', $('f-prefix').value.trim());
      q.set('limit', $('f-limit').value);
      location.hash = '#/signers?' + q.toString();
    });
    $('prev').addEventListener('click', () => {
      if (page > 0) {
        page--;
        refresh();
      }
    });
    $('next').addEventListener('click', () => {
      if (nextCursor) {
        cursors[page + 1] = nextCursor;
        page++;
        refresh();
      }
    });
    async function refresh() {
      const q = new URLSearchParams({ limit });
      if (chainId) q.set('chainId', chainId);
      if (prefix) q.set('prefix', prefix);
      if (cursors[page]) q.set('cursor', cursors[page]);
      let data;
      try {
        data = await api('/v1/signers?' + q.toString());
      } catch (err) {
        if (current !== view) return;
        failed(err);
        $('signer-rows').innerHTML = `<tr><td colspan="11" class="error">${esc(err.message)}</td></tr>`;
        return;
      }
      if (current !== view) return; // the operator moved on while this was read
      notice('');
      redraw($('signer-rows'), data.items.length ? data.items.map(signerRow).join('') : '<tr><td colspan="11" class="muted">No signers match.</td></tr>');
      nextCursor = data.nextCursor || '';
      const from = page * Number(limit);
      $('range').textContent = data.items.length ? `${from + 1}–${from + data.items.length} of ${data.total}` : `0 of ${data.total}`;
      $('prev').disabled = page === 0;
      $('next').disabled = !nextCursor;
      if (!document.body.dataset.firstRender) {
        // For the render-time measurement: ms from navigation start.
        document.body.dataset.firstRender = String(Math.round(performance.now()));
      }
      document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
    }
    const view = { refresh };
    return view;
  }

  // ---- one signer --------------------------------------------------------

  function signerView(chainId, address) {
    $('view').innerHTML = `<p><a href="#/signers">← All signers</a></p><h2>Signer <span class="mono">${esc(address)}</span> <span class="muted">chain ${esc(chainId)}</span></h2><div id="signer-body" class="muted">Loading…</div>`;
    async function refresh() {
      let data;
      try {
        data = await api(`/v1/signers?chainId=${encodeURIComponent(chainId)}&prefix=${encodeURIComponent(address)}&limit=1`);
      } catch (err) {
        if (current === view) failed(err);
        return;
      }
      if (current !== view) return;
      const s = data.items[0];
      if (!s) {
        $('signer-body').textContent = 'No such signer (or not one you may read).';
        return;
      }
      // Whether the account carries an EIP-7702 delegation is the chain's
      // to say: the signer status reads it; without an answer, nothing is
      // shown.
      const status = await api(`/v1/signers/${encodeURIComponent(address)}?chainId=${encodeURIComponent(chainId)}`).catch(() => null);
      if (current !== view) return;
      const delegated = status && status.delegated === true;
      const delegation = status && typeof status.delegated === 'boolean'
        ? (delegated
          ? '<span class="badge delegated" id="signer-delegated" title="its code begins with 0xef0100: nodes hold one of its transactions at a time, so they are sent one by one">EIP-7702 delegated</span> <span class="muted">one transaction in flight at a time</span>'
          : '<span class="muted" id="signer-delegated">none</span>')
        : '<span class="muted">—</span>';
      const rows = s.lane
        .map((t) => `<tr class="${t.state === 'STUCK' ? 'stuck' : ''}"><td class="num">${t.nonce}</td><td><span class="badge s-${esc(t.state)}">${esc(t.state)}</span> ${esc(t.subState)}</td><td><a class="mono" href="#/tx/${esc(t.id)}">${esc(t.id)}</a></td></tr>`)
        .join('');
      $('signer-body').className = '';
      redraw($('signer-body'), `<table><thead><tr><th>Signer</th><th>Nonce lane</th><th class="num">Final below</th><th class="num">Mined</th><th class="num">In flight</th><th class="num">Allocated</th><th class="num">Stuck</th><th class="num">Oldest pending</th><th class="num">Balance / need</th><th>Lease (token)</th><th>Last error</th></tr></thead><tbody>${signerRow(s)}</tbody></table>
<dl class="kv"><dt>Chain kind</dt><dd id="signer-kind">${kindHTML(s.chainKind)}</dd><dt>Next nonce</dt><dd>${s.nextNonce ?? '—'}</dd><dt>EIP-7702 delegation</dt><dd data-delegated="${delegated ? 1 : 0}">${delegation}</dd><dt>Last error at</dt><dd>${when(s.lastErrorAt)}</dd><dt>Last error</dt><dd class="mono">${esc(s.lastError) || '—'}</dd></dl>
<h3>Open transactions (first ${s.lane.length})</h3>
${rows ? `<table><thead><tr><th class="num">Nonce</th><th>State</th><th>Transaction</th></tr></thead><tbody>${rows}</tbody></table>` : '<p class="muted">Nothing open: every allocated nonce is final.</p>'}`);
    }
    const view = { refresh };
    return view;
  }

  // ---- chains: their endpoints' health ------------------------------------

  // chainsView shows each chain's endpoints as this API instance's client
  // last saw them: named by scheme and host (or a send-only endpoint's
  // name), never by a path or key, which the API does not send.
  function chainsView() {
    $('view').innerHTML = '<h2>Chains</h2><div id="chains-body" class="muted">Loading…</div>';
    const STATE_TITLE = {
      healthy: 'read from and broadcast to',
      lagging: 'its head is too far behind the best: not read from until it catches up',
      dead: 'its calls fail: passed over, retried with backoff',
    };
    async function refresh() {
      let data;
      try {
        data = await api('/v1/chains');
      } catch (err) {
        if (current === view) failed(err);
        return;
      }
      if (current !== view) return;
      const chains = data.items.map((c) => {
        const rows = c.endpoints
          .map((e) => `<tr data-endpoint="${esc(e.name)}" data-state="${esc(e.state)}"><td class="mono">${esc(e.name)}${e.sendOnly ? ` <span class="muted">send-only${e.publicFallback ? ', with fallback' : ', private'}</span>` : ''}</td><td><span class="badge e-${esc(e.state)}" title="${esc(STATE_TITLE[e.state] || '')}">${esc(e.state)}</span></td><td class="num">${e.head ?? '—'}</td><td class="num">${e.sendOnly ? '—' : e.lag}</td><td>${when(e.checkedAt)}</td><td>${esc(e.lastError) || '—'}</td><td>${when(e.lastErrorAt)}</td></tr>`)
          .join('');
        return `<h3 data-chain-kind="${esc(c.kind)}">Chain ${c.chainId} ${kindHTML(c.kind)}</h3>${rows
          ? `<table class="endpoints" data-chain="${c.chainId}"><thead><tr><th>Endpoint</th><th>State</th><th class="num">Head</th><th class="num">Lag (blocks)</th><th>Head read</th><th>Last error</th><th>Last error at</th></tr></thead><tbody>${rows}</tbody></table>`
          : '<p class="muted">No endpoint health known to this instance.</p>'}`;
      });
      $('chains-body').className = '';
      redraw($('chains-body'), chains.join('') || '<p class="muted">No chain configured.</p>');
    }
    const view = { refresh };
    return view;
  }

  // ---- one transaction ---------------------------------------------------

  function txView(id) {
    $('view').innerHTML = `<p><a href="#/signers">← All signers</a></p><div id="tx-body" class="muted">Loading…</div>
<div class="actions" id="tx-actions"></div><div id="outcome" class="outcome" role="status" aria-live="polite"></div><div id="tx-more"></div>`;
    let tx = null;

    function actionButtons() {
      const box = $('tx-actions');
      if (!me || !me.admin || !tx) {
        box.innerHTML = '';
        return;
      }
      const kinds = ['replace', 'cancel', 'resubmit'].filter((k) => ACTIONABLE[k].includes(tx.state));
      const want = kinds.join(',');
      if (box.dataset.kinds === want) return; // keep focus and state when nothing changed
      box.dataset.kinds = want;
      box.innerHTML = kinds.length
        ? `<span class="muted">Admin:</span>` +
          kinds.map((k) => `<button type="button" data-action="${k}" class="${k === 'cancel' ? 'danger' : ''}">${ACTION_LABEL[k]}</button>`).join('')
        : '';
      for (const b of box.querySelectorAll('button[data-action]')) b.addEventListener('click', () => openAction(b.dataset.action));
    }

    function openAction(kind) {
      const d = $('act');
      $('act-title').textContent = ACTION_LABEL[kind] + ' transaction';
      $('act-what').textContent = `${ACTION_LABEL[kind]} nonce ${tx.nonce} of ${tx.from} (${tx.state}${tx.subState ? ', ' + tx.subState : ''}).` +
        (kind === 'cancel' ? ' A 0-value self-transfer takes the nonce; the transaction ends FAILED_FINAL cancelled.' : '');
      $('act-fees').hidden = kind !== 'replace';
      $('act-reason').value = '';
      $('act-maxfee').value = '';
      $('act-tip').value = '';
      $('act-error').textContent = '';
      $('act-submit').disabled = false;
      d.dataset.kind = kind;
      d.showModal();
      $('act-reason').focus();
    }

    async function send(kind, reason, fees) {
      const body = { actionId: 'console-' + randomId(), reason };
      Object.assign(body, fees);
      const a = await api(`/v1/transactions/${id}/${kind}`, { method: 'POST', body });
      const out = $('outcome');
      out.textContent = `${ACTION_LABEL[kind]} recorded by ${a.actor} (${a.status}); the function holding the signer's lease carries it out…`;
      for (let i = 0; i < 180 && current && current.txId === id; i++) {
        await sleep(1000);
        let list;
        try {
          list = await api(`/v1/transactions/${id}/actions`);
        } catch (_) {
          continue;
        }
        const mine = list.items.find((x) => x.actionId === a.actionId);
        if (mine && mine.status !== 'pending') {
          out.textContent = `${ACTION_LABEL[kind]} ${mine.status}${mine.result ? ': ' + mine.result : ''}${mine.token ? ' (token ' + mine.token + ')' : ''}.`;
          refresh();
          return;
        }
      }
    }
    const view = {
      txId: id,
      refresh,
      submitAction: async (kind, reason, fees) => {
        try {
          await send(kind, reason, fees);
        } catch (err) {
          $('outcome').textContent = `${ACTION_LABEL[kind]} refused: ${err.message}`;
        }
      },
    };

    async function refresh() {
      let t, acts;
      try {
        [t, acts] = await Promise.all([api(`/v1/transactions/${id}?include=attempts,history`), api(`/v1/transactions/${id}/actions`)]);
      } catch (err) {
        if (current !== view) return;
        failed(err);
        $('tx-body').textContent = err.message;
        return;
      }
      if (current !== view) return;
      notice('');
      tx = t;
      const r = t.receipt;
      $('tx-body').className = '';
      redraw($('tx-body'), `<h2>Transaction <span class="mono">${esc(t.id)}</span> <span class="badge s-${esc(t.state)}" id="tx-state" data-state="${esc(t.state)}">${esc(t.state)}</span> <span id="tx-substate" class="mono">${esc(t.subState)}</span></h2>
<dl class="kv">
<dt>Signer</dt><dd><a class="mono" href="#/signer/${t.chainId}/${esc(t.from)}">${esc(t.from)}</a> on chain ${t.chainId}</dd>
<dt>Nonce</dt><dd>${t.nonce ?? '<span class="muted">none yet</span>'}</dd>
<dt>To</dt><dd class="mono">${esc(t.to) || '(contract creation)'}</dd>
<dt>Value</dt><dd>${esc(eth(t.value))} <span class="muted">(${esc(t.value)} wei)</span></dd>
<dt>Gas limit</dt><dd>${t.gasLimit ?? '—'}</dd>
${costHTML(t)}<dt>Request id</dt><dd class="mono">${esc(t.requestId) || '—'}</dd>
<dt>Hash</dt><dd class="mono">${esc(t.hash) || '—'}</dd>
<dt>Receipt</dt><dd>${r ? `block ${r.blockNumber} <span class="mono">${esc(short(r.blockHash))}</span>, status ${r.status}, gas used ${r.gasUsed}` : '—'}</dd>
<dt>Confirmations</dt><dd>${t.confirmations != null ? t.confirmations + (t.confirmationsRequired ? ' of ' + t.confirmationsRequired : '') : '—'}</dd>
<dt>Reorgs</dt><dd>${t.reorgCount}</dd>
<dt>Created / updated</dt><dd>${when(t.createdAt)} / ${when(t.updatedAt)}</dd>
<dt>Last error</dt><dd class="mono">${esc(t.lastError) || '—'}</dd>
${t.approval ? `<dt>Approval</dt><dd id="tx-approval">${approvalHTML(t)}${t.state === PENDING ? '<a href="#/approvals">Decide in the approvals queue</a>' : ''}</dd>` : ''}
</dl>
<h3>Simulated effects</h3><div id="tx-effects">${effectsHTML(t)}</div>`);
      actionButtons();
      const attempts = (t.attemptList || [])
        .map((a) => `<tr><td class="num">${a.no}</td><td>${esc(a.kind)}</td><td class="mono" title="${esc(a.hash)}">${esc(short(a.hash))}</td><td class="num">${a.maxFeePerGas ? gwei(a.maxFeePerGas) + ' / ' + gwei(a.maxPriorityFeePerGas) : gwei(a.gasPrice)}</td><td class="num">${a.gasLimit}</td><td>${when(a.broadcastAt)}</td><td class="num">${a.broadcastCount}</td><td>${esc(a.outcome) || '—'}</td><td class="num">${a.token}</td><td><div class="lasterr" title="${esc(a.lastError)}">${esc(a.lastError)}</div></td></tr>`)
        .join('');
      const history = (t.history || [])
        .map((h) => `<tr><td>${when(h.createdAt)}</td><td>${esc(h.from) || '—'} → <span class="badge s-${esc(h.to)}">${esc(h.to)}</span></td><td class="mono">${esc(h.subState)}</td><td>${esc(h.reason)}</td><td class="mono">${esc(h.owner)}</td><td class="num">${h.token}</td><td>${esc(h.action)}${h.actor ? ' by ' + esc(h.actor) : ''}</td></tr>`)
        .join('');
      const actions = acts.items
        .map((a) => `<tr><td>${when(a.createdAt)}</td><td>${esc(a.action)}</td><td>${esc(a.status)}</td><td>${esc(a.result)}</td><td>${esc(a.reason)}</td><td>${esc(a.actor)}</td><td class="num">${a.token || '—'}</td></tr>`)
        .join('');
      $('tx-more').innerHTML = `<h3>Attempts</h3>${attempts ? `<table><thead><tr><th class="num">#</th><th>Kind</th><th>Hash</th><th class="num">Max fee / tip (or gas price)</th><th class="num">Gas</th><th>First broadcast</th><th class="num">Sends</th><th>Outcome</th><th class="num">Token</th><th>Last error</th></tr></thead><tbody>${attempts}</tbody></table>` : '<p class="muted">Not signed yet.</p>'}
<h3>History</h3>${history ? `<table><thead><tr><th>When</th><th>Change</th><th>Sub-state</th><th>Reason</th><th>Owner</th><th class="num">Token</th><th>Action</th></tr></thead><tbody>${history}</tbody></table>` : '<p class="muted">No changes recorded.</p>'}
<h3>Admin actions</h3>${actions ? `<table><thead><tr><th>When</th><th>Action</th><th>Status</th><th>Result</th><th>Reason</th><th>Actor</th><th class="num">Token</th></tr></thead><tbody>${actions}</tbody></table>` : '<p class="muted">None.</p>'}`;
      document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
    }
    return view;
  }

  // ---- approvals queue ---------------------------------------------------
  // Transactions held for approval (state PENDING_APPROVAL, no nonce yet),
  // each with what it would move, and Approve / Reject for an approver. The
  // server decides who may approve (nobody their own request) and answers
  // 403 or 409 with the reason, shown on the row. An API that does not hold
  // transactions for approval refuses the state filter: the queue is then
  // empty.

  const PENDING = 'PENDING_APPROVAL';

  // approvalHTML is who must approve t, who has, and until when.
  function approvalHTML(t) {
    const a = t.approval;
    if (!a) return '<span class="muted">—</span>';
    const given = a.approvals || [];
    const who = a.approverRole ? `role <strong>${esc(a.approverRole)}</strong>` : (a.approvers || []).map(esc).join(', ') || '—';
    const done = given.length
      ? given.map((x) => `<span title="${esc(when(x.at))}">${esc(x.principal)}</span>`).join(', ')
      : '<span class="muted">none yet</span>';
    let until = '—';
    if (a.expiresAt) {
      const left = (new Date(a.expiresAt).getTime() - Date.now()) / 1000;
      until = left > 0 ? `${esc(when(a.expiresAt))} <span class="muted">(in ${age(left)})</span>` : `<span class="error">expired ${esc(when(a.expiresAt))}</span>`;
    }
    return `<div data-approvals="${given.length}" data-required="${a.required ?? ''}"><strong>${given.length} of ${esc(a.required ?? '?')}</strong> from ${who}</div>` +
      `<div class="muted">approved by: ${done}</div><div class="muted">expires: ${until}</div>`;
  }

  function approvalsView() {
    const outcomes = new Map(); // tx id → the last decision's answer shown on its row
    let deciding = null; // the transaction the reason dialog is for
    let items = [];
    let nextCursor = '';
    const cursors = [''];
    let page = 0;
    $('view').innerHTML = `<h2>Approvals</h2>
<p class="muted">Transactions held for approval: none has a nonce yet, so none holds its signer up. Approve or reject each from here; the server checks that you may.</p>
<div class="pager"><button type="button" id="prev">← Previous</button><button type="button" id="next">Next →</button><span id="range" aria-live="polite"></span></div>
<p id="decision" class="outcome" role="status" aria-live="polite"></p>
<div class="scroll"><table id="approvals">
<thead><tr><th scope="col">Requested</th><th scope="col">Requester</th><th scope="col">Signer</th><th scope="col">To</th><th scope="col" class="num">Value</th><th scope="col">Effects</th><th scope="col">Approval</th><th scope="col">Decide</th></tr></thead>
<tbody id="approval-rows"><tr><td colspan="8" class="muted">Loading…</td></tr></tbody>
</table></div>`;
    $('prev').addEventListener('click', () => {
      if (page > 0) {
        page--;
        refresh();
      }
    });
    $('next').addEventListener('click', () => {
      if (nextCursor) {
        cursors[page + 1] = nextCursor;
        page++;
        refresh();
      }
    });
    $('approval-rows').addEventListener('click', (e) => {
      const b = e.target.closest('button[data-action]');
      if (!b || b.disabled) return;
      const [kind, id] = b.dataset.action.split(':');
      const t = items.find((x) => x.id === id);
      if (!t) return;
      if (kind === 'approve') decide(t, 'approve', { comment: '' });
      else openReject(t);
    });

    // requester is who created t: the API gives it with t's approval.
    const requester = (t) => (t.approval && t.approval.requester) || '';

    function row(t) {
      const mine = me && requester(t) === me.principal;
      const approved = me && ((t.approval && t.approval.approvals) || []).some((x) => x.principal === me.principal);
      const out = outcomes.get(t.id);
      // The server refuses both decisions to the requester and a second
      // decision to an approver; other refusals are its to explain.
      const why = mine ? 'your own request: another approver decides' : approved ? 'you approved it already' : '';
      const off = why ? ` disabled title="${esc(why)}"` : '';
      return `<tr data-tx="${esc(t.id)}">
<td><a href="#/tx/${esc(t.id)}" title="${esc(t.id)}">${esc(when(t.createdAt))}</a></td>
<td>${esc(requester(t) || '—')}${mine ? ' <span class="tag">you</span>' : ''}</td>
<td class="nowrap">${addrHTML(t.from)} <span class="muted">· ${esc(t.chainId)}</span></td>
<td class="nowrap">${t.to ? addrHTML(t.to, t.from) : '<span class="muted">(contract creation)</span>'}</td>
<td class="num nowrap" title="${esc(t.value)} wei">${esc(eth(t.value))}</td>
<td>${effectsBrief(t)}</td>
<td>${approvalHTML(t)}</td>
<td><div class="buttons-inline"><button type="button" class="primary" data-action="approve:${esc(t.id)}"${off}>Approve</button>` +
        `<button type="button" class="danger" data-action="reject:${esc(t.id)}"${off}>Reject</button></div>` +
        `${out ? `<div class="${out.error ? 'error' : 'muted'}" data-outcome>${esc(out.text)}</div>` : ''}</td></tr>`;
    }

    function say(id, text, error) {
      outcomes.set(id, { text, error });
      $('decision').textContent = text;
      $('decision').className = 'outcome' + (error ? ' error' : '');
    }

    async function decide(t, kind, body) {
      const label = kind === 'approve' ? 'Approval' : 'Rejection';
      try {
        const r = await api(`/v1/transactions/${encodeURIComponent(t.id)}/${kind}`, { method: 'POST', body });
        const a = r && r.approval;
        say(t.id, kind === 'approve'
          ? `Approved ${t.id}${a ? ` (${(a.approvals || []).length} of ${a.required})` : ''}${r && r.state && r.state !== PENDING ? '; now ' + r.state : ''}.`
          : `Rejected ${t.id}: it ends FAILED_FINAL, rejected.`);
      } catch (err) {
        if (err.status !== 403 && err.status !== 409) {
          say(t.id, `${label} failed: ${err.message}`, true);
          if (current === view) failed(err);
          return;
        }
        say(t.id, `${label} refused: ${err.message}`, true); // the problem's detail: why this caller may not
      }
      refresh();
    }

    function openReject(t) {
      deciding = t;
      const d = $('act');
      $('act-title').textContent = 'Reject transaction';
      $('act-what').textContent = `Reject the request of ${requester(t) || 'unknown'} to send from ${t.from}` +
        ` (${t.id}). It ends FAILED_FINAL, rejected, and never gets a nonce.`;
      $('act-fees').hidden = true;
      $('act-reason').value = '';
      $('act-error').textContent = '';
      $('act-submit').disabled = false;
      d.dataset.kind = 'reject';
      d.showModal();
      $('act-reason').focus();
    }

    async function refresh() {
      const q = new URLSearchParams({ state: PENDING, limit: '100' });
      if (cursors[page]) q.set('cursor', cursors[page]);
      let data;
      try {
        data = await api('/v1/transactions?' + q.toString());
      } catch (err) {
        if (current !== view) return;
        const noQueue = err.status === 400 && ((err.problem && err.problem.errors) || []).some((e) => e.field === 'state');
        if (!noQueue) {
          failed(err);
          $('approval-rows').innerHTML = `<tr><td colspan="8" class="error">${esc(err.message)}</td></tr>`;
          return;
        }
        data = { items: [] }; // this API holds nothing for approval
      }
      if (current !== view) return;
      notice('');
      items = data.items;
      redraw($('approval-rows'), items.length ? items.map(row).join('') : '<tr><td colspan="8" class="muted">No transaction waits for approval.</td></tr>');
      nextCursor = data.nextCursor || '';
      $('range').textContent = items.length ? `${page * 100 + 1}–${page * 100 + items.length}` : '';
      $('prev').disabled = page === 0;
      $('next').disabled = !nextCursor;
      document.body.dataset.rendered = String(Number(document.body.dataset.rendered || 0) + 1);
    }

    const view = {
      approvals: true,
      refresh,
      submitAction: (kind, reason) => {
        if (kind === 'reject' && deciding) decide(deciding, 'reject', { reason });
      },
    };
    return view;
  }

  // The action dialog is shared; it asks the view on screen to send.
  function wireDialog() {
    const d = $('act');
    $('act-close').addEventListener('click', () => d.close());
    $('act-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const reason = $('act-reason').value.trim();
      if (!reason) {
        $('act-error').textContent = 'Give a reason: it is recorded with the action.';
        $('act-reason').focus();
        return;
      }
      const fees = {};
      for (const [id, key] of [['act-maxfee', 'maxFeePerGas'], ['act-tip', 'maxPriorityFeePerGas']]) {
        const v = $(id).value.trim();
        if (v && !/^[0-9]+$/.test(v)) {
          $('act-error').textContent = 'Fees are whole numbers of wei.';
          $(id).focus();
          return;
        }
        if (v && d.dataset.kind === 'replace') fees[key] = v;
      }
      d.close();
      if (current && current.submitAction) current.submitAction(d.dataset.kind, reason, fees);
    });
  }

  // ---- routing, live refresh ---------------------------------------------

  function route() {
    const h = location.hash.replace(/^#/, '') || '/signers';
    const [path, query] = h.split('?');
    const parts = path.split('/').filter(Boolean);
    notice('');
    if (parts[0] === 'tx' && parts[1]) current = txView(parts[1]);
    else if (parts[0] === 'approvals') current = approvalsView();
    else if (parts[0] === 'chains') current = chainsView();
    else if (parts[0] === 'signer' && parts[2]) current = signerView(parts[1], parts[2]);
    else current = signersView(new URLSearchParams(query || ''));
    Promise.resolve(current.refresh()).then(() => setLive('live · updated ' + new Date().toLocaleTimeString()));
    $('main').focus({ preventScroll: true });
  }

  let refreshing = false;
  async function refreshNow() {
    if (refreshing || !current || $('act').open) return;
    refreshing = true;
    try {
      await current.refresh();
      setLive('live · updated ' + new Date().toLocaleTimeString());
    } finally {
      refreshing = false;
    }
  }

  // follow long-polls the completions feed from now on: each outcome
  // (confirmed, failed, stuck) refreshes the view at once; a timer catches
  // the changes the feed does not carry (allocations, broadcasts). The
  // cursor is opaque: a number with one database, "a:12,b:40" with shards.
  async function follow() {
    const gen = ++feedGen;
    let after = 'latest';
    while (gen === feedGen) {
      try {
        const page = await api(`/v1/completions?after=${encodeURIComponent(after)}&wait=25s&limit=100`);
        if (gen !== feedGen) return;
        after = String(page.next);
        if (page.items.length) refreshNow();
      } catch (err) {
        setLive('live feed paused: ' + err.message);
        await sleep(5000);
      }
    }
  }

  // start reads who the caller is while the first view loads (the signers
  // view does not need to know); a transaction view and the approvals queue
  // are drawn again once the caller is known, since their buttons depend on
  // it.
  async function start() {
    const who = whoami();
    route();
    follow();
    await who;
    if (current && (current.txId || current.approvals)) current.refresh();
  }

  $('auth').addEventListener('submit', (e) => {
    e.preventDefault();
    const v = $('token').value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    $('token').value = '';
    start();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    start();
  });
  window.addEventListener('hashchange', route);
  setInterval(() => {
    if (document.visibilityState === 'visible') refreshNow();
  }, 5000);
  wireDialog();
  start();
})();
