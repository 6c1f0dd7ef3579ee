// sendmany sends many transactions over several signers through the
// TypeScript client (client/typescript), follows the completion feed from a
// cursor taken before the first create, and prints a summary line when
// every transaction is final, as examples/go/sendmany does.
//
// Against make dev (development mode: no key needed):
//
//   make example-ts URL=http://127.0.0.1:8080/Api N=1000
//
// which compiles it with the pinned tsc and runs
//
//   node .tools/tsclient/build/examples/typescript/sendmany/main.mjs --api URL [--key KEY] [-n N]
import { parseArgs } from "node:util";

import { CURSOR_LATEST, TransportError, TxfenceClient, TxfenceError, type State } from "../../../client/typescript/src/index.mjs";

const deadAddress = "0x000000000000000000000000000000000000dEaD";

interface Config {
  api: string;
  key: string;
  signers: string[];
  to: string;
  chainId?: number;
  n: number;
  concurrency: number;
  progressMs: number;
}

function config(): Config {
  const { values } = parseArgs({
    options: {
      api: { type: "string", default: "http://127.0.0.1:8080/Api" },
      key: { type: "string", default: process.env.TXFENCE_KEY ?? "" },
      signers: { type: "string", default: "" },
      to: { type: "string", default: deadAddress },
      chain: { type: "string", default: "0" },
      n: { type: "string", short: "n", default: "1000" },
      concurrency: { type: "string", default: "16" },
      progress: { type: "string", default: "2" },
    },
  });
  const int = (name: string, v: string | undefined, min: number): number => {
    const x = Number(v);
    if (!Number.isInteger(x) || x < min) throw new Error(`sendmany: --${name} must be an integer of at least ${min}, not ${JSON.stringify(v)}`);
    return x;
  };
  const chain = int("chain", values.chain, 0);
  const progress = Number(values.progress);
  if (!(progress > 0)) throw new Error(`sendmany: --progress must be a positive number of seconds, not ${JSON.stringify(values.progress)}`);
  return {
    api: values.api!,
    key: values.key ?? "",
    signers: (values.signers ?? "").split(",").map((s) => s.trim()).filter((s) => s !== ""),
    to: values.to!,
    chainId: chain === 0 ? undefined : chain,
    n: int("n", values.n, 1),
    concurrency: int("concurrency", values.concurrency, 1),
    progressMs: progress * 1000,
  };
}

/** err's message, with its cause's (fetch's "fetch failed" says why only there). */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  if (err instanceof TransportError) return err.message;
  const cause = (err as { cause?: unknown }).cause;
  return cause instanceof Error ? `${err.message}: ${cause.message}` : err.message;
}

/** The configured signers, from GET /v1/signers (which needs the reader role). */
async function listSigners(c: TxfenceClient, chainId: number | undefined): Promise<string[]> {
  const out: string[] = [];
  let cursor: string | undefined;
  for (;;) {
    let answer;
    try {
      answer = await c.api.GET("/v1/signers", { params: { query: { limit: 500, chainId, cursor } } });
    } catch (err) {
      throw new Error(`sendmany: list signers: ${describe(err)}`);
    }
    const { data, error, response } = answer;
    if (!data) {
      throw new Error(`sendmany: list signers: ${new TxfenceError(response.status, error).message} (pass --signers, or a key with the reader role)`);
    }
    for (const s of data.items ?? []) {
      if (s.configured && s.address && !out.some((a) => a.toLowerCase() === s.address!.toLowerCase())) out.push(s.address);
    }
    if (!data.nextCursor || (data.items ?? []).length === 0) return out;
    cursor = data.nextCursor;
  }
}

/** The feed's cursor now, retried as the client retries a call. */
async function latest(c: TxfenceClient, signal: AbortSignal): Promise<string> {
  let last: unknown;
  for (let attempt = 0; attempt < 10; attempt++) {
    try {
      return String((await c.completions(CURSOR_LATEST, { limit: 1, signal })).next);
    } catch (err) {
      last = err;
      if (err instanceof TxfenceError && (err.status === 401 || err.status === 403 || err.status === 400)) break;
      if (signal.aborted) break;
      await new Promise((r) => setTimeout(r, (attempt + 1) * 200));
    }
  }
  throw new Error(`sendmany: take the feed's cursor: ${describe(last)}`);
}

async function run(cfg: Config, signal: AbortSignal): Promise<void> {
  const c = new TxfenceClient({ baseUrl: cfg.api, apiKey: cfg.key || undefined });
  const signers = cfg.signers.length > 0 ? cfg.signers : await listSigners(c, cfg.chainId);
  if (signers.length === 0) throw new Error("sendmany: no signers: pass --signers");
  const start = Date.now();
  const seconds = () => ((Date.now() - start) / 1000).toFixed(1);

  // The cursor is taken before the first create: every outcome of this
  // run's transactions is numbered after it.
  const cursor = await latest(c, signal);
  console.log(`sendmany: sending ${cfg.n} transactions over ${signers.length} signers to ${cfg.to} from feed cursor ${cursor}`);

  const mine = new Set<string>();
  // The newest outcome of each transaction, this run's or not (an outcome
  // may arrive before its create's answer).
  const last = new Map<string, State>();
  const wasStuck = new Set<string>();
  let created = false;
  const counts = () => {
    let confirmed = 0, failed = 0, stuck = 0;
    for (const id of mine) {
      const s = last.get(id);
      if (s === "CONFIRMED") confirmed++;
      else if (s === "FAILED_FINAL") failed++;
      else if (s === "STUCK") stuck++;
    }
    return { confirmed, failed, stuck };
  };
  const done = () => {
    if (!created) return false;
    const { confirmed, failed } = counts();
    return confirmed + failed === mine.size;
  };

  const stop = new AbortController();
  const onAbort = () => stop.abort(signal.reason);
  signal.addEventListener("abort", onAbort, { once: true });
  let createError: unknown;

  // Creates, cfg.concurrency at a time.
  let next = 0;
  const creates = Promise.all(
    Array.from({ length: Math.min(cfg.concurrency, cfg.n) }, async () => {
      while (next < cfg.n && !stop.signal.aborted) {
        const i = next++;
        try {
          const t = await c.createExactlyOnce(
            { chainId: cfg.chainId, from: signers[i % signers.length]!, to: cfg.to, value: "1", gasLimit: 21000 },
            { signal: stop.signal },
          );
          mine.add(t.id);
        } catch (err) {
          if (createError === undefined && !stop.signal.aborted) {
            createError = err;
            stop.abort(err);
          }
          return;
        }
      }
    }),
  ).then(() => {
    created = true;
    // The last outcome came before the last answer.
    if (done()) stop.abort();
  });

  const progress = setInterval(() => {
    const { confirmed, failed, stuck } = counts();
    console.log(`sendmany: progress sent=${mine.size}/${cfg.n} confirmed=${confirmed} failed=${failed} stuck=${stuck} seconds=${seconds()}`);
  }, cfg.progressMs);

  let followError: unknown;
  try {
    for await (const it of c.follow(cursor, { signal: stop.signal })) {
      last.set(it.txId, it.state);
      if (it.state === "STUCK" && !wasStuck.has(it.txId)) {
        wasStuck.add(it.txId);
        console.log(`sendmany: stuck tx=${it.txId} signer=${it.signer} subState=${it.subState ?? ""} (waiting for it)`);
      }
      if (done()) break;
    }
  } catch (err) {
    followError = err;
  } finally {
    clearInterval(progress);
    signal.removeEventListener("abort", onAbort);
  }
  stop.abort();
  await creates;
  if (createError !== undefined) throw new Error(`sendmany: ${describe(createError)}`);
  if (!done()) {
    const why = signal.aborted ? signal.reason : followError;
    throw new Error(`sendmany: follow the feed: ${describe(why)}`);
  }
  const { confirmed, failed } = counts();
  const retries = Object.values(c.stats()).reduce((a, b) => a + (b ?? 0), 0);
  console.log(`sendmany: sent=${mine.size} confirmed=${confirmed} failed=${failed} stuck=${wasStuck.size} retries=${retries} seconds=${seconds()}`);
}

const interrupt = new AbortController();
for (const sig of ["SIGINT", "SIGTERM"] as const) process.once(sig, () => interrupt.abort(new Error(`interrupted (${sig})`)));
try {
  await run(config(), interrupt.signal);
} catch (err) {
  console.error(err instanceof Error ? err.message : String(err));
  process.exitCode = 1;
}
