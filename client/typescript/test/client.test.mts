// The TypeScript client against a running stack. functions/internal/clienttest
// (TestIssue49_TypeScriptClient) starts the stack and the fault edges,
// compiles this with the pinned tsc and runs it with node --test, with:
//   TXFENCE_API         the API (API keys only)
//   TXFENCE_KEY         a key with the sender and reader roles on every signer
//   TXFENCE_CREATE_EDGE the API behind an edge that loses or refuses creates'
//                       answers; GET /_edge there says what it injected
//   TXFENCE_FEED_EDGE   the API behind an edge that fails feed polls and
//                       rewinds others (a redelivery); GET /_edge likewise
//   TXFENCE_SIGNERS     the signers, comma-separated
//   TXFENCE_TO          the recipient of each transfer
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type AddressInfo } from "node:net";

import {
  CURSOR_LATEST,
  NotOnFeedError,
  TransportError,
  TxfenceClient,
  TxfenceError,
  isFinal,
  parseRetryAfter,
  type FeedItem,
  type RetryReason,
} from "../src/index.mjs";

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run this through TestIssue49_TypeScriptClient`);
  return v;
}

const api = env("TXFENCE_API");
const key = env("TXFENCE_KEY");
const signers = env("TXFENCE_SIGNERS").split(",");
const to = env("TXFENCE_TO");
// The tests' own backoffs are short; Retry-After is honoured as sent.
const fast = { maxAttempts: 20, minBackoffMs: 10, maxBackoffMs: 200 };

type Injected = Record<string, number>;

async function injected(edge: string): Promise<Injected> {
  const r = await fetch(`${edge}/_edge`);
  assert.equal(r.status, 200);
  return (await r.json()) as Injected;
}

/** Every transaction the stack holds, read through the API. */
async function allTransactions(c: TxfenceClient): Promise<Map<string, string | null | undefined>> {
  const out = new Map<string, string | null | undefined>();
  let cursor: string | undefined;
  for (;;) {
    const page = await c.list({ limit: 500, cursor });
    for (const t of page.items) out.set(t.id, t.requestId);
    if (!page.nextCursor || page.items.length === 0) return out;
    cursor = page.nextCursor;
  }
}

async function pool<T>(n: number, concurrency: number, f: (i: number) => Promise<T>): Promise<T[]> {
  const out: T[] = new Array(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await f(i);
      }
    }),
  );
  return out;
}

test("createExactlyOnce creates each transaction once however its answers are lost or refused", async () => {
  const edge = env("TXFENCE_CREATE_EDGE");
  const direct = new TxfenceClient({ baseUrl: api, apiKey: key, retry: fast });
  const before = await allTransactions(direct);

  const hooked: Partial<Record<RetryReason, number>> = {};
  const sameIds = new Map<string, Set<string>>();
  const c = new TxfenceClient({
    baseUrl: edge, apiKey: key, retry: fast,
    onRetry: (e) => {
      hooked[e.reason] = (hooked[e.reason] ?? 0) + 1;
      assert.ok(e.requestId, "a create's retry names its request id");
      if (!sameIds.has(e.requestId)) sameIds.set(e.requestId, new Set());
      sameIds.get(e.requestId)!.add(e.path);
    },
  });
  const creates = 60;
  const results = await pool(creates, 8, async (i) => {
    // Half carry the caller's own request id; the client makes the others.
    const requestId = i % 2 === 0 ? `ts-caller-${i}` : undefined;
    const got = await c.createExactlyOnce({ from: signers[i % signers.length]!, to, value: String(i + 1), gasLimit: 21000, requestId });
    return { requestId, got };
  });

  const ids = new Set<string>();
  const requestIds = new Set<string>();
  let replayed = 0;
  for (const { requestId, got } of results) {
    assert.ok(!ids.has(got.id), `transaction ${got.id} answered twice`);
    ids.add(got.id);
    assert.ok(got.requestId, "every create carries a request id");
    if (requestId) assert.equal(got.requestId, requestId);
    assert.ok(!requestIds.has(got.requestId!), `request id ${got.requestId} answered twice`);
    requestIds.add(got.requestId!);
    assert.equal(typeof got.nonce, "number");
    if (got.replayed) replayed++;
  }

  // Exactly one row per create: the stack holds these and no others.
  const after = await allTransactions(direct);
  const added = [...after.keys()].filter((id) => !before.has(id));
  assert.equal(added.length, creates, "rows written by the creates");
  for (const id of added) assert.ok(ids.has(id), `a row no create answered with: ${id}`);

  const inj = await injected(edge);
  const stats = c.stats();
  console.log(`injected ${JSON.stringify(inj)}; retries ${JSON.stringify(stats)}; replayed ${replayed}`);
  for (const f of ["dropAfter", "unknownAfter", "limited", "badGateway", "dropBefore"]) assert.ok((inj[f] ?? 0) > 0, `the edge injected no ${f}`);
  // Every retry is one the edge caused, counted under its reason.
  assert.equal(stats.transport ?? 0, (inj.dropAfter ?? 0) + (inj.dropBefore ?? 0));
  assert.equal(stats.outcome_unknown ?? 0, inj.unknownAfter ?? 0);
  assert.equal(stats.rate_limited ?? 0, inj.limited ?? 0);
  assert.equal(stats.server_error ?? 0, inj.badGateway ?? 0);
  assert.deepEqual(hooked, stats);
  // A create whose answer was lost is answered by a replay of it.
  assert.equal(replayed, inj.faulted ?? 0);
});

test("follow resumes from a stored cursor: every outcome arrives, none twice", async () => {
  const edge = env("TXFENCE_FEED_EDGE");
  const direct = new TxfenceClient({ baseUrl: api, apiKey: key, retry: fast });
  const start = String((await direct.completions(CURSOR_LATEST, { limit: 1 })).next);
  const txs = 24;
  const want = new Set<string>();
  for (let i = 0; i < txs; i++) {
    const t = await direct.createExactlyOnce({ from: signers[i % signers.length]!, to, value: String(i + 1), gasLimit: 21000 });
    want.add(t.id);
  }

  const seen = new Set<string>();
  const final = new Set<string>();
  const take = (it: FeedItem) => {
    const k = `${it.shard ?? ""}/${it.seq}`;
    assert.ok(!seen.has(k), `(${it.shard ?? ""}, ${it.seq}) twice`);
    seen.add(k);
    if (want.has(it.txId) && isFinal(it.state)) final.add(it.txId);
  };
  const deadline = AbortSignal.timeout(120_000);

  // The first client handles a third of the outcomes, storing the cursor
  // after each, and stops.
  const c1 = new TxfenceClient({ baseUrl: edge, apiKey: key, retry: fast });
  let stored = "";
  for await (const it of c1.follow(start, { waitMs: 2000, limit: 4, signal: deadline })) {
    take(it);
    stored = it.cursor;
    if (final.size >= txs / 3) break;
  }
  assert.notEqual(stored, "");

  // A new client resumes from the stored cursor.
  const c2 = new TxfenceClient({ baseUrl: edge, apiKey: key, retry: fast });
  for await (const it of c2.follow(stored, { waitMs: 2000, limit: 4, signal: deadline })) {
    take(it);
    if (final.size === txs) break;
  }
  assert.equal(final.size, txs);
  const inj = await injected(edge);
  console.log(`feed edge injected ${JSON.stringify(inj)}; retries ${JSON.stringify(c1.stats())} ${JSON.stringify(c2.stats())}`);
  assert.ok((inj.badGateway ?? 0) > 0 && (inj.rewound ?? 0) > 0, "the edge failed and rewound polls");
  assert.ok((c1.stats().server_error ?? 0) + (c2.stats().server_error ?? 0) > 0, "no failed poll was retried");
});

test("follow asks for lifecycle events only when told to", async () => {
  const urls: string[] = [];
  const stub = async (input: RequestInfo | URL): Promise<Response> => {
    urls.push(input instanceof Request ? input.url : String(input));
    const body = { items: [{ seq: 7 + urls.length, type: "TxConfirmed", txId: "00000000-0000-4000-8000-000000000001", chainId: 1, signer: signers[0], state: "CONFIRMED", newFork: false }], next: 7 + urls.length };
    return new Response(JSON.stringify(body), { status: 200, headers: { "Content-Type": "application/json" } });
  };
  for (const events of [undefined, "lifecycle"] as const) {
    urls.length = 0;
    const c = new TxfenceClient({ baseUrl: api, fetch: stub });
    const got: FeedItem[] = [];
    for await (const it of c.follow("7", { events })) {
      got.push(it);
      if (got.length === 2) break;
    }
    assert.deepEqual(got.map((it) => it.cursor), ["8", "9"]);
    for (const u of urls) {
      const q = new URL(u).searchParams;
      assert.equal(q.get("events"), events ?? null, u);
    }
    assert.equal(new URL(urls[0]!).searchParams.get("after"), "7");
  }
});

test("follow over a sharded feed: each (shard, seq) once, cursors naming every shard, never back", async () => {
  const ev = (shard: string, seq: number) => ({ seq, shard, type: "TxConfirmed", txId: `00000000-0000-4000-8000-00000000${shard === "a" ? "a" : "b"}${String(seq).padStart(3, "0")}`, chainId: 1, signer: signers[0], state: "CONFIRMED", newFork: false });
  // What the stub answers, call by call: the first page (limit 1), a page
  // that repeats b:6, a redelivery from behind, then nothing more.
  const pages = [
    { items: [ev("b", 6)], next: "a:3,b:6" },
    { items: [ev("a", 4), ev("b", 6), ev("a", 5)], next: "a:5,b:6" },
    { items: [ev("a", 4)], next: "a:4,b:6" },
    { items: [ev("b", 7)], next: "a:5,b:7" },
  ];
  const asked: string[] = [];
  const stub = async (input: RequestInfo | URL): Promise<Response> => {
    const u = new URL(input instanceof Request ? input.url : String(input));
    asked.push(u.searchParams.get("after") ?? "");
    const page = pages[asked.length - 1] ?? { items: [], next: "a:5,b:7" };
    return new Response(JSON.stringify(page), { status: 200, headers: { "Content-Type": "application/json" } });
  };
  const c = new TxfenceClient({ baseUrl: api, fetch: stub });
  const got: string[] = [];
  for await (const it of c.follow("a:3,b:5")) {
    got.push(`${it.shard}:${it.seq} -> ${it.cursor}`);
    if (got.length === 4) break;
  }
  assert.deepEqual(got, ["b:6 -> a:3,b:6", "a:4 -> a:4,b:6", "a:5 -> a:5,b:6", "b:7 -> a:5,b:7"]);
  // After the redelivery the next poll asks from where it was, not from behind.
  assert.deepEqual(asked, ["a:3,b:5", "a:3,b:6", "a:5,b:6", "a:5,b:6"]);
});

test("Retry-After in seconds or as a date", () => {
  const now = Date.UTC(2026, 0, 1);
  assert.equal(parseRetryAfter("3", now), 3000);
  assert.equal(parseRetryAfter("", now), 0);
  assert.equal(parseRetryAfter(null, now), 0);
  assert.equal(parseRetryAfter("x", now), 0);
  assert.equal(parseRetryAfter("-1", now), 0);
  assert.equal(parseRetryAfter(new Date(now + 5000).toUTCString(), now), 5000);
  assert.equal(parseRetryAfter(new Date(now - 3600_000).toUTCString(), now), 0);
});

test("answers that may not be retried are typed errors, each tried once", async () => {
  const calls: string[] = [];
  const counting = (input: RequestInfo | URL, init?: RequestInit) => {
    const r = input instanceof Request ? input : new Request(input, init);
    calls.push(`${r.method} ${new URL(r.url).pathname}`);
    return fetch(r);
  };
  const c = new TxfenceClient({ baseUrl: api, apiKey: key, retry: fast, fetch: counting });

  await assert.rejects(c.createExactlyOnce({ from: "0x1234", to, gasLimit: 21000 }), (err: unknown) => {
    assert.ok(err instanceof TxfenceError && err instanceof Error);
    assert.equal(err.status, 422);
    assert.equal(err.kind, "invalid-request");
    assert.equal(err.type, "https://txfence.dev/problems/invalid-request");
    assert.ok(err.title);
    assert.ok(err.fields.some((f) => f.field === "from"), JSON.stringify(err.fields));
    return true;
  });

  const first = await c.createExactlyOnce({ from: signers[0]!, to, value: "1", gasLimit: 21000, requestId: "ts-r-1" });
  assert.equal(first.replayed, false);
  const again = await c.createExactlyOnce({ from: signers[0]!, to, value: "1", gasLimit: 21000, requestId: "ts-r-1" });
  assert.equal(again.replayed, true);
  assert.equal(again.id, first.id);
  await assert.rejects(c.createExactlyOnce({ from: signers[0]!, to, value: "2", gasLimit: 21000, requestId: "ts-r-1" }), (err: unknown) => {
    assert.ok(err instanceof TxfenceError);
    assert.equal(err.status, 409);
    assert.equal(err.kind, "idempotency-conflict");
    assert.equal(err.existingId, first.id);
    return true;
  });
  const byRequest = await c.getByRequestId(signers[0]!, "ts-r-1");
  assert.equal(byRequest.id, first.id);

  await assert.rejects(c.get("00000000-0000-4000-8000-000000000000"), (err: unknown) => {
    assert.ok(err instanceof TxfenceError);
    assert.equal(err.status, 404);
    assert.equal(err.kind, "not-found");
    assert.match(err.message, /^txfence: 404 /);
    return true;
  });
  await assert.rejects(c.list({ state: "NOPE" as never }), (err: unknown) => err instanceof TxfenceError && (err.status === 400 || err.status === 422));

  const anonymous = new TxfenceClient({ baseUrl: api, retry: fast });
  await assert.rejects(anonymous.get(first.id), (err: unknown) => err instanceof TxfenceError && err.status === 401 && err.kind === "unauthenticated");
  await assert.rejects(anonymous.follow("").next(), (err: unknown) => err instanceof TxfenceError && err.status === 401);

  const page = await c.list({ signer: signers[0]!, limit: 1 });
  assert.equal(page.items.length, 1);
  assert.deepEqual(c.stats(), {});
  assert.deepEqual(anonymous.stats(), {});
  assert.equal(calls.filter((s) => s === "POST /v1/transactions").length, 4, "each refused create tried once");
});

test("a call nothing answers is a TransportError, retried up to maxAttempts", async () => {
  // A port nothing listens on any more.
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, "127.0.0.1", resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise((resolve) => srv.close(resolve));
  const c = new TxfenceClient({ baseUrl: `http://127.0.0.1:${port}`, retry: { maxAttempts: 3, minBackoffMs: 1, maxBackoffMs: 2 } });
  await assert.rejects(c.get("00000000-0000-4000-8000-000000000000"), (err: unknown) => {
    assert.ok(err instanceof TransportError);
    assert.match(err.message, /ECONNREFUSED/);
    return true;
  });
  assert.deepEqual(c.stats(), { transport: 2 });
});

test("wait waits for the outcome through the feed", async () => {
  const c = new TxfenceClient({ baseUrl: api, apiKey: key, retry: fast });
  const created = await c.createExactlyOnce({ from: signers[1 % signers.length]!, to, value: "1", gasLimit: 21000 });
  await assert.rejects(c.wait(created.id, ["MINED"]), NotOnFeedError);
  const got = await c.wait(created.id, undefined, { signal: AbortSignal.timeout(60_000) });
  assert.equal(got.state, "CONFIRMED");
  assert.equal(got.id, created.id);
});
