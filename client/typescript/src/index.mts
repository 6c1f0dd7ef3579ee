// The txfence API's TypeScript client: openapi-fetch typed by the types
// generated from functions/api/openapi.json (schema.d.ts), with the helpers
// that make exactly-once easy on top, as the Go client
// (github.com/txfence/txfence/client) does: a create that is retried with
// the same request id until it answers, a feed that is followed from a
// cursor the caller stores, each (shard, seq) once, and typed errors.
import createFetchClient from "openapi-fetch";
import type { Client as FetchClient } from "openapi-fetch";
import type { components, paths } from "./schema.js";

export type { components, paths };

/** A transaction's state. */
export type State = components["schemas"]["State"];
/** A transaction as the API shows it. */
export type Transaction = components["schemas"]["Transaction"];
/** A create's body; requestId may be left out (createExactlyOnce makes one). */
export type CreateRequest = components["schemas"]["CreateTransaction"];
/** A page of transactions, newest first. */
export type TransactionPage = components["schemas"]["TransactionPage"];
/** One answer of the feed. */
export type CompletionPage = components["schemas"]["CompletionPage"];
/** One event of the feed. */
export type Completion = CompletionPage["items"][number];
/** The problem+json document of an answer other than a success. */
export type Problem = components["schemas"]["Problem"];

/**
 * Which events the feed carries: outcomes only (TxConfirmed, TxFailed,
 * TxStuck; the server's default) or every step of each transaction.
 */
export type FeedEvents = "outcomes" | "lifecycle";

/** The states a transaction ends in (a deep reorg may still reopen a CONFIRMED one). */
export function isFinal(s: State | undefined): boolean {
  return s === "CONFIRMED" || s === "FAILED_FINAL";
}

/** Why a call was retried, as RetryEvent.reason and stats() count it. */
export type RetryReason =
  | "transport" // no answer: the connection failed or dropped
  | "rate_limited" // 429
  | "outcome_unknown" // 503 outcome-unknown
  | "unavailable" // another 503
  | "server_error"; // another 5xx

/** One retry the client is about to make. */
export interface RetryEvent {
  method: string;
  path: string;
  /** The request id of a create; undefined for other calls. */
  requestId?: string;
  /** The attempt that failed, from 1. */
  attempt: number;
  reason: RetryReason;
  waitMs: number;
  error: Error;
}

/** Bounds on retries; a field left out takes its default. */
export interface RetryPolicy {
  /** Attempts of one call (default 10); the call's signal bounds them too. */
  maxAttempts?: number;
  /** Bounds of the exponential backoff between attempts (default 100ms and 5s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
  /** Cap on a server's Retry-After (default 1 minute); a longer one than maxBackoffMs is honoured up to it. */
  maxRetryAfterMs?: number;
}

export interface ClientOptions {
  /** The API's root, without /v1 (http://127.0.0.1:8080/Api under make dev). */
  baseUrl: string;
  /** An API key (txfk_k_...) sent as the bearer token. */
  apiKey?: string;
  /**
   * Gives the bearer token of each attempt (a Google ID token, say); asked
   * before every attempt, so one that caches must refresh before expiry.
   */
  token?: () => string | Promise<string>;
  /** Makes the calls (default globalThis.fetch). */
  fetch?: typeof globalThis.fetch;
  retry?: RetryPolicy;
  /** Called before every retry. */
  onRetry?: (e: RetryEvent) => void;
}

/** Options of a single call. */
export interface CallOptions {
  signal?: AbortSignal;
}

const problemBase = "https://txfence.dev/problems/";

/**
 * An answer of the API other than a success: its problem+json document.
 * kind is the last segment of type (not-found, rate-limited,
 * outcome-unknown, ...), empty when the answer was not a problem (a
 * proxy's).
 */
export class TxfenceError extends Error {
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail?: string;
  /** The policy rule behind a 403. */
  readonly rule?: string;
  /** The create's request id behind a 503 outcome-unknown. */
  readonly requestId?: string;
  /** The transaction a 409's request id already names. */
  readonly existingId?: string;
  /** The fields a 422 refused. */
  readonly fields: { field: string; message: string }[];
  /** The answer's Retry-After in ms (429 and 503), 0 without. */
  readonly retryAfterMs: number;
  readonly problem?: Partial<Problem>;

  constructor(status: number, body: unknown, retryAfterMs = 0) {
    const p = isProblem(body) ? body : undefined;
    const title = p?.title ?? "";
    let msg = `txfence: ${status} ${title || statusText(status)}`;
    if (p?.detail) msg += `: ${p.detail}`;
    if (p?.rule) msg += ` (rule ${p.rule})`;
    super(msg);
    this.name = "TxfenceError";
    this.status = status;
    this.type = p?.type ?? "";
    this.title = title;
    this.detail = p?.detail;
    this.rule = p?.rule;
    this.requestId = p?.requestId;
    this.existingId = p?.existingId;
    this.fields = p?.errors ?? [];
    this.retryAfterMs = retryAfterMs;
    this.problem = p;
  }

  get kind(): string {
    return this.type.startsWith(problemBase) ? this.type.slice(problemBase.length) : "";
  }

  /** Whether the call may be retried as it was sent: 429 and every 5xx. */
  get retryable(): boolean {
    return this.status === 429 || this.status >= 500;
  }
}

/** A call that got no whole answer (the connection failed or dropped). */
export class TransportError extends Error {
  constructor(readonly cause: unknown) {
    super(`txfence: transport: ${describeCause(cause)}`);
    this.name = "TransportError";
  }
}

// fetch says only "fetch failed"; why (a refused connection, a reset) is its cause's message.
function describeCause(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const cause = (err as { cause?: unknown }).cause;
  return cause instanceof Error && cause.message !== err.message ? `${err.message} (${cause.message})` : err.message;
}

function isProblem(b: unknown): b is Partial<Problem> {
  return typeof b === "object" && b !== null && typeof (b as { status?: unknown }).status === "number";
}

function statusText(status: number): string {
  const texts: Record<number, string> = {
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 409: "Conflict",
    413: "Payload Too Large", 415: "Unsupported Media Type", 422: "Unprocessable Entity",
    429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout",
  };
  return texts[status] ?? "";
}

/** Whether err may be retried, why, and after how long the server asked. */
function retryReason(err: unknown): { reason: RetryReason; retryAfterMs: number } | undefined {
  if (err instanceof TransportError) return { reason: "transport", retryAfterMs: 0 };
  if (!(err instanceof TxfenceError) || !err.retryable) return undefined;
  if (err.status === 429) return { reason: "rate_limited", retryAfterMs: err.retryAfterMs };
  if (err.kind === "outcome-unknown") return { reason: "outcome_unknown", retryAfterMs: err.retryAfterMs };
  if (err.status === 503) return { reason: "unavailable", retryAfterMs: err.retryAfterMs };
  return { reason: "server_error", retryAfterMs: err.retryAfterMs };
}

/** Reads a Retry-After of seconds or an HTTP date, in ms. */
export function parseRetryAfter(v: string | null, now = Date.now()): number {
  const s = (v ?? "").trim();
  if (s === "") return 0;
  if (/^\d+$/.test(s)) return Number(s) * 1000;
  const t = Date.parse(s);
  return Number.isFinite(t) && t > now ? t - now : 0;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

// Node 18 has no global crypto (Node 19 and browsers do): its module then.
const nodeCrypto: { randomUUID(): string } | undefined =
  typeof globalThis.crypto?.randomUUID === "function" ? undefined : await import("node:crypto").catch(() => undefined);

/** A fresh random request id (a UUID v4). */
export function newRequestId(): string {
  if (typeof globalThis.crypto?.randomUUID === "function") return globalThis.crypto.randomUUID();
  if (nodeCrypto) return nodeCrypto.randomUUID();
  throw new Error("txfence: no crypto.randomUUID here: pass a requestId");
}

/** A create's answer: replayed says the request id already named it (200). */
export type Created = Transaction & { replayed: boolean };

export interface ListOptions extends CallOptions {
  signer?: string;
  chainId?: number;
  state?: State;
  /** RFC 3339 times. */
  createdAfter?: string;
  createdBefore?: string;
  /** The page's size (1..500; default the server's 50). */
  limit?: number;
  /** A previous page's nextCursor. */
  cursor?: string;
}

export interface CompletionsOptions extends CallOptions {
  /** At most this many items (default the server's 100). */
  limit?: number;
  /** Hold an empty answer back up to this long (at most 30s). */
  waitMs?: number;
  /** Which events (default: the server's, outcomes only). */
  events?: FeedEvents;
}

export interface FollowOptions extends CallOptions {
  /** Each long poll's wait (default and at most 30s). */
  waitMs?: number;
  /** Each page's size (default the server's 100). */
  limit?: number;
  /** lifecycle: every step of each transaction, not only its outcome. */
  events?: FeedEvents;
}

/** One event follow yields, with the cursor to store once it is handled. */
export type FeedItem = Completion & { cursor: string };

/** follow's start from now: only what is written from then on. */
export const CURSOR_LATEST = "latest";

/** A wait for a state the feed does not report. */
export class NotOnFeedError extends Error {
  constructor(state: string) {
    super(`txfence: wait for ${state}: the feed reports only CONFIRMED, FAILED_FINAL and STUCK`);
    this.name = "NotOnFeedError";
  }
}

/** A wait whose transaction ended in a state other than those waited for. */
export class EndedError extends Error {
  constructor(readonly transaction: Transaction) {
    super(`txfence: wait ${transaction.id}: ended ${transaction.state}`);
    this.name = "EndedError";
  }
}

type Answer = { data?: unknown; error?: unknown; response: Response };

/** A call: how to make one attempt of it, and what to say of it. */
interface Call {
  method: string;
  path: string;
  requestId?: string;
  /** Tried once: a long poll's retries are follow's. */
  once?: boolean;
  signal?: AbortSignal;
  send: (init: { signal?: AbortSignal }) => Promise<Answer>;
}

/**
 * A client of one txfence deployment. api is the openapi-fetch client it
 * calls through (with its credential), for the routes it has no helper
 * for.
 */
export class TxfenceClient {
  readonly api: FetchClient<paths>;
  readonly baseUrl: string;
  private readonly retry: Required<RetryPolicy>;
  private readonly onRetry?: (e: RetryEvent) => void;
  private readonly counts = new Map<RetryReason, number>();

  constructor(o: ClientOptions) {
    let u: URL;
    try {
      u = new URL(o.baseUrl);
    } catch {
      throw new Error(`txfence: base URL ${JSON.stringify(o.baseUrl)} must be an absolute http(s) URL`);
    }
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new Error(`txfence: base URL ${JSON.stringify(o.baseUrl)} must be an absolute http(s) URL`);
    }
    this.baseUrl = o.baseUrl.replace(/\/+$/, "");
    const r = o.retry ?? {};
    const minBackoffMs = r.minBackoffMs && r.minBackoffMs > 0 ? r.minBackoffMs : 100;
    this.retry = {
      maxAttempts: r.maxAttempts && r.maxAttempts > 0 ? r.maxAttempts : 10,
      minBackoffMs,
      maxBackoffMs: Math.max(r.maxBackoffMs && r.maxBackoffMs > 0 ? r.maxBackoffMs : 5000, minBackoffMs),
      maxRetryAfterMs: r.maxRetryAfterMs && r.maxRetryAfterMs > 0 ? r.maxRetryAfterMs : 60_000,
    };
    this.onRetry = o.onRetry;
    // Bound late, so that a fetch patched or replaced after the client is made is the one used.
    const f = o.fetch ?? ((input: RequestInfo | URL, init?: RequestInit) => globalThis.fetch(input, init));
    this.api = createFetchClient<paths>({ baseUrl: this.baseUrl, fetch: f, headers: { Accept: "application/json" } });
    const token = o.token ?? (o.apiKey ? () => o.apiKey as string : undefined);
    if (token) {
      this.api.use({
        async onRequest({ request }) {
          const t = await token();
          if (t) request.headers.set("Authorization", `Bearer ${t}`);
          return request;
        },
      });
    }
  }

  /** How many retries the client has made, by reason. */
  stats(): Partial<Record<RetryReason, number>> {
    return Object.fromEntries(this.counts);
  }

  /** The wait before attempt n+1 after attempt n failed: full jitter over an exponential bound, or the server's Retry-After. */
  private backoff(n: number, retryAfterMs: number): number {
    const p = this.retry;
    if (retryAfterMs > 0) return Math.min(retryAfterMs, p.maxRetryAfterMs);
    const bound = n < 30 ? Math.min(p.minBackoffMs * 2 ** (n - 1), p.maxBackoffMs) : p.maxBackoffMs;
    return p.minBackoffMs / 2 + Math.random() * (bound - p.minBackoffMs / 2);
  }

  private noteRetry(e: RetryEvent): void {
    this.counts.set(e.reason, (this.counts.get(e.reason) ?? 0) + 1);
    this.onRetry?.(e);
  }

  /** One attempt: the answer's data, or a TxfenceError or TransportError. */
  private async attempt(c: Call): Promise<{ data: unknown; status: number }> {
    let a: Answer;
    try {
      a = await c.send({ signal: c.signal });
    } catch (err) {
      if (c.signal?.aborted) throw c.signal.reason;
      if (err instanceof SyntaxError) throw new Error(`txfence: decode answer: ${err.message}`);
      throw new TransportError(err);
    }
    const status = a.response.status;
    if (a.response.ok) return { data: a.data, status };
    throw new TxfenceError(status, a.error, parseRetryAfter(a.response.headers.get("Retry-After")));
  }

  /** Sends c, retrying what may be retried as it was sent. */
  private async call(c: Call): Promise<{ data: unknown; status: number }> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.attempt(c);
      } catch (err) {
        const why = retryReason(err);
        if (!why || c.once || attempt >= this.retry.maxAttempts || c.signal?.aborted) throw err;
        const waitMs = this.backoff(attempt, why.retryAfterMs);
        this.noteRetry({ method: c.method, path: c.path, requestId: c.requestId, attempt, reason: why.reason, waitMs, error: err as Error });
        await sleep(waitMs, c.signal);
      }
    }
  }

  /**
   * Creates r exactly once: gives it a request id when it has none and
   * retries every answer that may be retried (no answer, 429 after its
   * Retry-After, 5xx, 503 outcome-unknown) with that same id, so that the
   * transaction is created once however many attempts it takes. A replay's
   * answer (200) is a success, with replayed set. A 4xx other than 429 is
   * thrown at once, a TxfenceError.
   */
  async createExactlyOnce(r: CreateRequest, o: CallOptions = {}): Promise<Created> {
    const body: CreateRequest = { ...r, requestId: r.requestId || newRequestId() };
    const { data, status } = await this.call({
      method: "POST", path: "/v1/transactions", requestId: body.requestId, signal: o.signal,
      send: (init) => this.api.POST("/v1/transactions", { body, ...init }),
    });
    return { ...(data as Transaction), replayed: status === 200 };
  }

  /** Reads one transaction. */
  async get(id: string, o: CallOptions = {}): Promise<Transaction> {
    const { data } = await this.call({
      method: "GET", path: "/v1/transactions/{id}", signal: o.signal,
      send: (init) => this.api.GET("/v1/transactions/{id}", { params: { path: { id } }, ...init }),
    });
    return data as Transaction;
  }

  /** Finds the transaction a create's request id names, on signer from. */
  async getByRequestId(from: string, requestId: string, o: CallOptions & { chainId?: number } = {}): Promise<Transaction> {
    const query = { from, requestId, ...(o.chainId ? { chainId: o.chainId } : {}) };
    const { data } = await this.call({
      method: "GET", path: "/v1/transactions", signal: o.signal,
      send: (init) => this.api.GET("/v1/transactions", { params: { query }, ...init }),
    });
    return data as Transaction;
  }

  /** Reads a page of transactions. */
  async list(o: ListOptions = {}): Promise<TransactionPage> {
    const { signal, ...filters } = o;
    const query = Object.fromEntries(Object.entries(filters).filter(([, v]) => v !== undefined && v !== ""));
    const { data } = await this.call({
      method: "GET", path: "/v1/transactions", signal,
      send: (init) => this.api.GET("/v1/transactions", { params: { query }, ...init }),
    });
    const p = data as TransactionPage;
    return { ...p, items: p.items ?? [] };
  }

  /**
   * Reads one page of the feed after the cursor after (empty: the start;
   * latest: now). It is tried once: follow and wait retry it.
   */
  async completions(after: string, o: CompletionsOptions = {}): Promise<CompletionPage> {
    type Query = NonNullable<paths["/v1/completions"]["get"]["parameters"]["query"]>;
    // events is passed only when asked, so that the default feed is the server's default.
    const query: Query & { events?: FeedEvents } = {};
    if (after) query.after = after;
    if (o.limit && o.limit > 0) query.limit = o.limit;
    if (o.waitMs && o.waitMs > 0) query.wait = `${Math.ceil(o.waitMs)}ms`;
    if (o.events) query.events = o.events;
    const { data } = await this.call({
      method: "GET", path: "/v1/completions", once: true, signal: o.signal,
      send: (init) => this.api.GET("/v1/completions", { params: { query: query as Query }, ...init }),
    });
    return data as CompletionPage;
  }

  /**
   * Yields the feed's events after cursor (empty: the start; latest: now)
   * until o.signal aborts, each (shard, seq) once: what a page repeats (a
   * redelivery) is skipped. Each item carries the cursor to store once it
   * is handled; following from it yields what comes after, nothing before.
   * A poll that may be retried (no answer, 429, 5xx) is retried after a
   * backoff, counted in stats(); one that may not (a cursor or credential
   * the server refuses) is thrown, and so is the signal's reason.
   */
  async *follow(cursor: string, o: FollowOptions = {}): AsyncGenerator<FeedItem, void, undefined> {
    const waitMs = o.waitMs && o.waitMs > 0 && o.waitMs <= 30_000 ? o.waitMs : 30_000;
    const pos = Position.parse(cursor);
    let fails = 0;
    // The first page holds one item: its cursor is then the server's, which
    // names every shard, so that each later item's cursor can be said
    // exactly (a caller's may be latest, or leave shards out).
    let limit: number | undefined = 1;
    for (;;) {
      if (o.signal?.aborted) throw o.signal.reason;
      let page: CompletionPage;
      try {
        page = await this.completions(cursor, { limit, waitMs, events: o.events, signal: o.signal });
      } catch (err) {
        if (o.signal?.aborted) throw o.signal.reason;
        const why = retryReason(err);
        if (!why) throw err;
        fails++;
        const wait = this.backoff(fails, why.retryAfterMs);
        this.noteRetry({ method: "GET", path: "/v1/completions", attempt: fails, reason: why.reason, waitMs: wait, error: err as Error });
        await sleep(wait, o.signal);
        continue;
      }
      fails = 0;
      limit = o.limit;
      const items = page.items ?? [];
      for (let i = 0; i < items.length; i++) {
        const it = items[i]!;
        if (!pos.advance(it.shard ?? "", it.seq)) continue; // at or below what was yielded: a redelivery
        if (i === items.length - 1) pos.merge(Position.parse(String(page.next)));
        yield { ...it, cursor: pos.format(cursor) };
      }
      // Never back: a page that repeats (a redelivery) carries a cursor behind what was yielded.
      pos.merge(Position.parse(String(page.next)));
      cursor = pos.format(String(page.next));
    }
  }

  /**
   * Waits until transaction id is in one of states (default: CONFIRMED or
   * FAILED_FINAL) through the feed's long poll, not by polling the
   * transaction, and returns it as get reads it then. The feed reports
   * CONFIRMED, FAILED_FINAL and STUCK; another state throws
   * NotOnFeedError. One that ends in a final state not waited for throws
   * EndedError.
   */
  async wait(id: string, states: State[] = ["CONFIRMED", "FAILED_FINAL"], o: CallOptions = {}): Promise<Transaction> {
    for (const s of states) {
      if (s !== "CONFIRMED" && s !== "FAILED_FINAL" && s !== "STUCK") throw new NotOnFeedError(s);
    }
    // The cursor is taken before the transaction is read: an outcome is
    // numbered only after the write that ends the transaction commits, so
    // one the read does not show comes after the cursor.
    let start = "";
    for (let attempt = 1; ; attempt++) {
      try {
        start = String((await this.completions(CURSOR_LATEST, { limit: 1, signal: o.signal })).next);
        break;
      } catch (err) {
        const why = retryReason(err);
        if (!why || o.signal?.aborted || attempt >= this.retry.maxAttempts) throw err;
        const waitMs = this.backoff(attempt, why.retryAfterMs);
        this.noteRetry({ method: "GET", path: "/v1/completions", attempt, reason: why.reason, waitMs, error: err as Error });
        await sleep(waitMs, o.signal);
      }
    }
    const reached = (t: Transaction): boolean => {
      if (states.includes(t.state)) return true;
      if (isFinal(t.state)) throw new EndedError(t);
      return false;
    };
    const first = await this.get(id, o);
    if (reached(first)) return first;
    const stop = new AbortController();
    const onAbort = () => stop.abort(o.signal?.reason);
    o.signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const it of this.follow(start, { signal: stop.signal })) {
        if (it.txId.toLowerCase() !== id.toLowerCase()) continue;
        if (!states.includes(it.state) && !isFinal(it.state)) continue;
        const t = await this.get(id, o);
        if (reached(t)) return t;
        // Reopened since (a reorg): wait for its next outcome.
      }
    } finally {
      o.signal?.removeEventListener("abort", onAbort);
      stop.abort();
    }
    throw o.signal?.reason ?? new Error("txfence: wait ended");
  }
}

/**
 * Each shard's last yielded seq; a bare number in a cursor is the home
 * shard's, whose name the client does not know ("" here).
 */
class Position {
  private order: string[] = [];
  private seq = new Map<string, number>();
  /** The cursor it was read from named the home shard by a bare number. */
  private bare = false;

  static parse(c: string): Position {
    const p = new Position();
    const s = c.trim();
    if (s === "" || s === CURSOR_LATEST) return p;
    for (const part of s.split(",")) {
      const i = part.indexOf(":");
      let name = "";
      let seq = part;
      if (i < 0) p.bare = true;
      else [name, seq] = [part.slice(0, i), part.slice(i + 1)];
      if (!/^\d+$/.test(seq)) continue; // the server refuses it, and says why
      p.set(name, Number(seq));
    }
    return p;
  }

  private set(name: string, seq: number): void {
    if (!this.seq.has(name)) this.order.push(name);
    this.seq.set(name, seq);
  }

  /** Records (shard, seq) and says whether it is new. */
  advance(shard: string, seq: number): boolean {
    const last = this.seq.get(shard);
    if (last !== undefined && seq <= last) return false;
    this.set(shard, seq);
    return true;
  }

  /** Takes the server's cursor's positions that are ahead. */
  merge(q: Position): void {
    for (const name of q.order) {
      const last = this.seq.get(name);
      const next = q.seq.get(name)!;
      if (last === undefined || next > last) this.set(name, next);
    }
    this.bare = q.bare;
  }

  /**
   * The cursor after what is recorded. A sharded feed read from a bare
   * number cannot be said until the server names the home shard: then
   * from, the cursor the page was asked with, is the safe answer (resuming
   * from it repeats, never skips).
   */
  format(from: string): string {
    const named = this.order.some((n) => n !== "");
    if (named && this.bare) return from;
    if (!named) return String(this.seq.get("") ?? 0);
    return this.order.map((n) => `${n}:${this.seq.get(n)}`).join(",");
  }
}
