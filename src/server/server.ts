import { createHash, timingSafeEqual } from 'node:crypto';
import { requireTokenizerFiles } from '../tokenizer/load.js';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as path from 'node:path';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { type OpenOptions, Model } from '../api/model.js';
import { ApiError, anthropicErrorBody, asApiError, badRequest, openaiErrorBody } from './errors.js';
import { Host } from './host.js';
import { WasteError, excerpt, quoted } from '../util/errors.js';
import { boundConnections, timeoutOptions } from './connections.js';
import { type BodyLease, BodyBudget, bodiesInFlight, nestedDeeperThan, readBody, tooLarge } from './request-body.js';
import type { ImageOptions } from './images.js';
import { anthropicRoutes } from './anthropic.js';
import { completionRoutes } from './completions.js';
import { openaiRoutes } from './openai.js';
import type { TurnLog } from './run-turn.js';
import { webRoutes } from './web.js';
import { checkListen, listenError } from './listen-check.js';
import { modelRoutes } from './models.js';

export interface ServerOptions {
  /** The container directory. */
  model: string;
  /** Engine options (budget, threads…). */
  open?: OpenOptions;
  /** Address to listen on (default 127.0.0.1: this machine only). */
  host?: string;
  /** Port (default 8000; 0 = any free port). */
  port?: number;
  /** Clients must send it as `Authorization: Bearer KEY` (or Anthropic's `x-api-key`). */
  apiKey?: string;
  /** The model's name for clients (default: the directory's name). */
  modelId?: string;
  /** Cap on tokens per reply (default 4096). */
  maxTokens?: number;
  /** Requests that may wait for the engine before 429 (default 16). */
  queueLimit?: number;
  /** Conversations kept at once, each in its own session (default 1, at least `parallel`); reserved when the model opens. */
  sessions?: number;
  /**
   * Requests that decode together, their steps batched (default: as many as the budget holds the
   * state of, up to 4); each has a session of its own, reserved when the model opens.
   */
  parallel?: number;
  /** Largest request body in bytes (default 8 MiB); an image sent inline is part of it. */
  maxBodyBytes?: number;
  /**
   * Bytes of request bodies held at once across connections, from their first byte (their
   * Content-Length, before any is read) to the end of their answers (default 4 × maxBodyBytes);
   * a request beyond it gets 429.
   */
  maxInflightBytes?: number;
  /** Request bodies parsed and requests' schemas compiled at once, each in slices; more wait their turn (default 2). */
  compiles?: number;
  /** Most subschemas, names and enum values in one request's JSON Schemas, all counted together (default 50,000); more is a 400. */
  maxSchemaSize?: number;
  /** Most states one request's JSON Schemas compile to, counted while compiling (default 200,000); more is a 400. */
  maxGrammarStates?: number;
  /** Milliseconds a request's headers and body may take to arrive (default 60,000); a slower one gets 408. */
  requestTimeoutMs?: number;
  /** Connections open at once (default 256); one more is answered 503 and closed. */
  maxConnections?: number;
  /** How image parts are taken: their size, and whether http(s) image URLs are fetched. */
  images?: ImageOptions;
  /** Where request log lines go (default: standard error); false for none. */
  log?: ((line: string) => void) | false;
}

export interface RunningServer {
  url: string;
  host: Host;
  close(): Promise<void>;
}

/** What the routes share per request. */
export type RouteEnv = {
  Variables: {
    /** Who is asking (for the fair queue): the key if any, else the peer address. */
    client: string;
    /** The body as JSON (a 400 when it is not JSON). */
    json: () => Promise<unknown>;
    /** The request body's share of the bytes in flight. */
    body: BodyLease;
    turn: TurnLog | undefined;
    warn: (msg: string) => void;
  };
};

const isAnthropic = (p: string) => p.startsWith('/v1/messages');

const LOOPBACK_HOST = /^(localhost|127(?:\.\d{1,3}){3}|\[::1\])(?::\d+)?$/i;

/** Deeper request JSON is refused: the code that walks schemas and tool inputs recurses. */
const MAX_JSON_DEPTH = 128;

/** The defaults of the bounds on what a request may cost (ServerOptions). */
export const REQUEST_BOUNDS = {
  maxBodyBytes: 8 << 20,
  compiles: 2,
  maxSchemaSize: 50_000,
  maxGrammarStates: 200_000,
  requestTimeoutMs: 60_000,
  maxConnections: 256,
} as const;

function keyMatches(given: string, key: string): boolean {
  // compare digests: equal lengths for timingSafeEqual, and no length leak
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(given), h(key));
}

/** The HTTP application over an open engine (no socket: `app.request()` drives it in tests). */
export function createApp(
  host: Host,
  opts: Pick<ServerOptions, 'apiKey' | 'maxBodyBytes' | 'maxInflightBytes' | 'log'> & { loopbackOnly?: boolean; connections?: () => { open: number; max: number } } = {},
): Hono<RouteEnv> {
  const app = new Hono<RouteEnv>();
  const maxBody = opts.maxBodyBytes ?? REQUEST_BOUNDS.maxBodyBytes;
  const bodies = new BodyBudget(opts.maxInflightBytes ?? 4 * maxBody);
  const write = opts.log === false ? () => {} : (opts.log ?? ((l: string) => process.stderr.write(`${l}\n`)));
  const errorResponse = (p: string, e: ApiError) => new Response(JSON.stringify(isAnthropic(p) ? anthropicErrorBody(e) : openaiErrorBody(e)), { status: e.status, headers: { 'content-type': 'application/json', ...e.headers } });

  app.use('*', async (c, next) => {
    const t0 = performance.now();
    const peer = (c.env as { incoming?: { socket?: { remoteAddress?: string } } } | undefined)?.incoming?.socket?.remoteAddress ?? 'local';
    c.set('client', peer);
    c.set('turn', undefined);
    c.set('warn', (m: string) => write(`waste serve: ${c.req.method} ${c.req.path}: ${m}`));
    const lease = bodies.lease();
    c.set('body', lease);
    c.set('json', async () => {
      const text = await readBody(c.req.raw.body, lease, maxBody, bodies);
      if (!text.trim()) throw badRequest('the request body is empty: send a JSON object');
      // parsing holds what the body becomes: a turn at a time among the compiles, walked in slices
      return host.work.run(c.req.raw.signal, async () => {
        host.parsing++;
        try {
          let doc: unknown;
          try {
            doc = JSON.parse(text) as unknown;
          } catch (e) {
            throw badRequest(`the request body is not valid JSON (${(e as Error).message})`);
          }
          if (await nestedDeeperThan(doc, MAX_JSON_DEPTH)) throw badRequest(`the request body nests JSON deeper than ${MAX_JSON_DEPTH} levels`);
          return doc;
        } finally {
          host.parsing--;
        }
      });
    });
    try {
      await next();
    } finally {
      // what the body became lives as long as the answer: a streamed one, until its stream ends
      const t = c.get('turn');
      if (t?.done) void t.done.then(() => lease.release());
      else lease.release();
    }
    const t = c.get('turn');
    const status = c.res.status;
    const report = () => {
      const r = t?.result;
      const secs = (performance.now() - t0) / 1000;
      let line = `${new Date().toISOString()} ${peer} ${c.req.method} ${c.req.path} ${status} ${secs.toFixed(2)} s`;
      if (t) line += ` ${t.stream ? 'stream' : 'json'} queued ${t.waitedSeconds.toFixed(2)} s`;
      if (r) {
        const demand = r.hits + r.misses;
        line += ` | ${r.promptTokens} prompt + ${r.completionTokens} reply tokens, ${(r.generateSeconds > 0 ? r.completionTokens / r.generateSeconds : 0).toFixed(1)} tok/s, ${r.finish}`;
        line += ` | experts ${demand ? ((100 * r.hits) / demand).toFixed(1) : '0.0'} % hit, ${(r.bytesRead / 1e6).toFixed(1)} MB read`;
      }
      write(line);
    };
    if (t?.done) void t.done.then(report);
    else report();
  });

  app.use('*', async (c, next) => {
    // bound to this machine only, answer only to this machine's names, on every route: a page that
    // rebinds its own name to 127.0.0.1 (DNS rebinding) is same-origin with the server in its
    // visitor's browser, so it could read /health (model, budget, queue, sessions) or drive /v1
    const host = c.req.header('host');
    if (opts.loopbackOnly && host !== undefined && !LOOPBACK_HOST.test(host))
      return errorResponse(c.req.path, new ApiError(403, `the Host ${quoted(host)} is not this machine: the server listens on a loopback address (use --host to serve other names)`, 'permission_error', 'bad_host'));
    await next();
  });

  app.use('/v1/*', async (c, next) => {
    // a web page elsewhere may not drive this server through its visitor's browser: a browser
    // names the page's origin, and it must be this server's own
    const origin = c.req.header('origin');
    const host = c.req.header('host');
    if (origin !== undefined) {
      let from = '';
      try {
        from = new URL(origin).host;
      } catch {
        /* "null" or garbage: refused below */
      }
      if (from !== host) return errorResponse(c.req.path, new ApiError(403, `requests from web pages of another origin (${excerpt(origin)}) are refused`, 'permission_error', 'cross_origin'));
    }
    if (opts.apiKey) {
      const auth = c.req.header('authorization');
      const given = auth?.match(/^Bearer\s+(.+)$/i)?.[1] ?? c.req.header('x-api-key');
      if (given === undefined || !keyMatches(given, opts.apiKey)) return errorResponse(c.req.path, new ApiError(401, 'a valid API key is required (Authorization: Bearer KEY)', 'authentication_error', 'invalid_api_key'));
      c.set('client', `key:${createHash('sha256').update(given).digest('hex').slice(0, 12)}`);
    }
    await next();
  });

  app.use('/v1/*', async (c, next) => {
    // a declared length is bounded before a byte of the body is read (the body is left to node,
    // which reads and drops it, so the client reads this answer rather than a reset)
    const declared = c.req.header('content-length');
    if (declared !== undefined && /^\d+$/.test(declared.trim())) {
      const n = Number(declared);
      if (n > maxBody) return errorResponse(c.req.path, tooLarge(maxBody));
      if (n > 0 && !c.get('body').take(n)) return errorResponse(c.req.path, bodiesInFlight(bodies));
    }
    await next();
  });

  app.get('/health', (c) => {
    const s = host.model.stats();
    return c.json({
      status: 'ok',
      model: host.opts.id,
      uptime_s: Math.round((Date.now() - host.started) / 1000),
      budget_bytes: s.budgetBytes,
      context_length: host.contextLength,
      queue: { running: host.queue.running, waiting: host.queue.queued, active: host.queue.active, parallel: host.queue.slots },
      sessions: host.sessionStats(),
      images: imageStats(host),
      // what requests hold now of what they may: bodies in flight, parses and compiles, connections
      requests: {
        body_bytes: bodies.used,
        max_body_bytes: bodies.max,
        parsing: host.parsing,
        compiling: host.compiling,
        rendering: host.rendering,
        waiting: host.work.waiting,
        compiles: host.work.slots,
        ...(opts.connections ? { connections: opts.connections().open, max_connections: opts.connections().max } : {}),
      },
      cache: {
        slots: s.slots,
        hits: s.hits,
        misses: s.misses,
        hit_rate: s.hitRate,
        bytes_read: s.bytesRead,
        direct: s.direct,
        // the elastic cache (default budget): its arenas now, what it grows back to, its last resizes
        elastic: host.model.elastic !== undefined,
        bytes: s.cacheBytes,
        target_bytes: s.cacheMaxBytes,
        resizes: s.resizes.map((r) => ({ at: r.at, from_bytes: r.fromBytes, to_bytes: r.toBytes, from_slots: r.fromSlots, to_slots: r.toSlots, why: r.why })),
      },
    });
  });

  openaiRoutes(app, host);
  modelRoutes(app, host);
  completionRoutes(app, host);
  anthropicRoutes(app, host);
  webRoutes(app);

  app.notFound((c) => errorResponse(c.req.path, new ApiError(404, `no route ${c.req.method} ${c.req.path}`, 'invalid_request_error', 'not_found')));
  app.onError((e, c) => {
    const err = asApiError(e);
    if (err.status >= 500) c.get('warn')?.(`${err.message}${process.env.WASTE_DEBUG ? `\n${(e as Error).stack}` : ''}`);
    return errorResponse(c.req.path, err);
  });
  return app;
}

/** Whether the model takes images, how, and what its tower has done (the chat page reads `accepted`). */
function imageStats(host: Host) {
  const i = host.images;
  return { accepted: i.accepted, urls: i.accepted && i.opts.allowUrls, max_bytes: i.opts.maxBytes, max_pixels: i.opts.maxPixels, decoding: i.decoding, encoded: i.encoded, reused: i.reused };
}

/** The directory name a model goes by (without a .waste suffix). */
export function modelIdOf(dir: string): string {
  return path.basename(path.resolve(dir)).replace(/\.waste$/, '') || 'model';
}

/** The most requests the default `parallel` decodes together. */
export const DEFAULT_PARALLEL = 4;

/**
 * Open the model with a session's state reserved for each request decoding at once: `parallel`
 * as asked, or by default the most (up to DEFAULT_PARALLEL) whose states the budget holds beside
 * the floor — fewer when a budget near the floor has no room for more.
 */
async function openForParallel(dir: string, open: OpenOptions, kept: number, parallel: number | undefined): Promise<{ model: Model; parallel: number }> {
  if (parallel !== undefined) return { model: await Model.open(dir, { ...open, sessions: Math.max(kept, parallel) }), parallel };
  for (let n = DEFAULT_PARALLEL; ; n = Math.floor(n / 2)) {
    try {
      return { model: await Model.open(dir, { ...open, sessions: Math.max(kept, n) }), parallel: n };
    } catch (e) {
      // refused before anything loads: the budget (or the machine) has no room for n states
      if (n > 1 && e instanceof WasteError && e.code === 'E_ARG' && /floor/.test(e.message)) continue;
      throw e;
    }
  }
}

/** The bounds of ServerOptions checked before the model opens: each a positive integer, bodies in flight at least one whole body. */
function checkBounds(opts: ServerOptions): void {
  for (const k of ['maxBodyBytes', 'maxInflightBytes', 'compiles', 'maxSchemaSize', 'maxGrammarStates', 'requestTimeoutMs', 'maxConnections'] as const) {
    const v = opts[k];
    if (v !== undefined && !(Number.isSafeInteger(v) && v >= 1)) throw new WasteError('E_ARG', `${k} must be a positive integer (got ${String(v)})`);
  }
  const body = opts.maxBodyBytes ?? REQUEST_BOUNDS.maxBodyBytes;
  if (opts.maxInflightBytes !== undefined && opts.maxInflightBytes < body) throw new WasteError('E_ARG', `maxInflightBytes (${opts.maxInflightBytes}) must be at least maxBodyBytes (${body}), or no body of the largest size could be taken`);
}

/** Open the model and serve it; resolves once the server is listening. */
export async function startServer(opts: ServerOptions): Promise<RunningServer> {
  checkBounds(opts);
  const kept = opts.sessions ?? opts.open?.sessions ?? 1;
  const hostname = opts.host ?? '127.0.0.1';
  const port = opts.port ?? 8000;
  // a busy port or a host that is not this machine's is found before minutes of loading
  await checkListen(hostname, port);
  requireTokenizerFiles(opts.model);
  const { model, parallel } = await openForParallel(opts.model, opts.open ?? {}, kept, opts.parallel);
  const sessions = Math.max(kept, parallel);
  model.tokenizer(); // a model without a tokenizer cannot chat: say so now, not on the first request
  let host: Host;
  try {
    host = new Host(model, {
      id: opts.modelId ?? modelIdOf(opts.model),
      maxTokens: opts.maxTokens ?? 4096,
      queueLimit: opts.queueLimit ?? 16,
      sessions,
      parallel,
      images: opts.images,
      compiles: opts.compiles ?? REQUEST_BOUNDS.compiles,
      compile: { schemaSize: opts.maxSchemaSize ?? REQUEST_BOUNDS.maxSchemaSize, grammarStates: opts.maxGrammarStates ?? REQUEST_BOUNDS.maxGrammarStates },
    });
  } catch (e) {
    await model.close();
    throw e;
  }
  const bounds = { maxConnections: opts.maxConnections ?? REQUEST_BOUNDS.maxConnections, requestTimeoutMs: opts.requestTimeoutMs ?? REQUEST_BOUNDS.requestTimeoutMs };
  let connections: { readonly open: number } = { open: 0 };
  const app = createApp(host, { ...opts, loopbackOnly: hostname === 'localhost' || hostname === '::1' || hostname.startsWith('127.'), connections: () => ({ open: connections.open, max: bounds.maxConnections }) });
  // the body a route leaves unread is left to node, which reads and drops it (the adapter's own
  // clean-up closes the connection after half a second, a reset for a client still sending)
  const server = createAdaptorServer({ fetch: app.fetch, hostname, serverOptions: timeoutOptions(bounds.requestTimeoutMs), autoCleanupIncoming: false }) as Server;
  connections = boundConnections(server, bounds);
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, hostname, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    await host.close();
    throw listenError(e, hostname, port) ?? e;
  }
  const addr = server.address() as AddressInfo;
  const shown = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  return {
    url: `http://${shown}:${addr.port}`,
    host,
    close: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
      });
      // the connections are gone, so a running turn stops within a token: wait for them all
      const release = await host.queue.drain('shutdown');
      release();
      await host.close();
    },
  };
}
