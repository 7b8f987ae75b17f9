import { downloadFile, listFiles, modelInfo } from '@huggingface/hub';
import { eitherSignal } from '../util/abort.js';
import { WasteError } from '../util/errors.js';

/** One file of a repository at a commit, with the hash the hub keeps for it. */
export interface HubFile {
  path: string;
  size: number;
  /** sha256 of the content (LFS and Xet files: the big ones), else undefined. */
  sha256?: string;
  /** The git blob id (sha1 of `blob SIZE\0` + content): what the hub gives for small files. */
  gitOid?: string;
}

export interface HubOptions {
  /** The hub's address (default `$HF_ENDPOINT`, else https://huggingface.co). */
  endpoint?: string;
  /** An access token (default `$HF_TOKEN`): gated and private repositories need one. */
  token?: string;
  /** The fetch the library calls (tests count or cut requests through it). */
  fetch?: typeof fetch;
}

/**
 * The hub, through `@huggingface/hub`: resolving a revision to its commit, listing files with their
 * hashes, reading a file as a Blob whose `slice()` is an HTTP Range request. The library reads no
 * environment variables itself, so `HF_ENDPOINT` and `HF_TOKEN` are read here and passed in.
 */
export class Hub {
  readonly endpoint: string;
  private readonly token: string | undefined;
  private readonly fetchFn: typeof fetch | undefined;
  /** What every request of ours goes through: the caller's fetch (or the global one), hearing `signal`. */
  private readonly call: typeof fetch;

  /** `signal` stops every request this hub makes (a pull's own AbortSignal). */
  constructor(opts: HubOptions = {}, signal?: AbortSignal) {
    this.endpoint = (opts.endpoint ?? process.env.HF_ENDPOINT ?? 'https://huggingface.co').replace(/\/+$/, '');
    const t = opts.token ?? process.env.HF_TOKEN;
    this.token = t && t !== '' ? t : undefined;
    if (this.token && !this.token.startsWith('hf_')) throw new WasteError('E_ARG', 'HF_TOKEN does not look like a HuggingFace access token (they start with hf_)');
    this.fetchFn = opts.fetch;
    const base = opts.fetch ?? ((input, init) => fetch(input, init));
    this.call = signal ? (input, init) => base(input, { ...init, signal: eitherSignal(init?.signal ?? undefined, signal) }) : base;
  }

  /** What another thread needs to reach the same hub; undefined with a custom fetch (it cannot cross threads). */
  portable(): { endpoint: string; token?: string } | undefined {
    return this.fetchFn ? undefined : { endpoint: this.endpoint, ...(this.token ? { token: this.token } : {}) };
  }

  private params(repo: string) {
    return { repo: { type: 'model' as const, name: repo }, hubUrl: this.endpoint, ...(this.token ? { accessToken: this.token } : {}), fetch: this.call };
  }

  /** The commit a revision (branch, tag or commit) names now: a pull reads every file from that one commit. */
  async commitOf(repo: string, revision: string): Promise<string> {
    const info = await hubCall(`${repo}@${revision}`, () =>
      modelInfo({ name: repo, revision, hubUrl: this.endpoint, additionalFields: ['sha'], ...(this.token ? { accessToken: this.token } : {}), fetch: this.call }),
    );
    const sha = (info as { sha?: unknown }).sha;
    if (typeof sha !== 'string' || !/^[0-9a-f]{40}$/.test(sha)) throw new WasteError('E_FORMAT', `${this.endpoint}: the hub gave no commit for ${repo}@${revision}`);
    return sha;
  }

  async list(repo: string, commit: string): Promise<HubFile[]> {
    return hubCall(repo, async () => {
      const files: HubFile[] = [];
      for await (const f of listFiles({ ...this.params(repo), revision: commit, recursive: true })) {
        if (f.type !== 'file') continue;
        files.push({ path: f.path, size: f.lfs?.size ?? f.size, sha256: f.lfs?.oid, gitOid: f.lfs ? undefined : f.oid });
      }
      return files;
    });
  }

  /** The file as a Blob read over HTTP (nothing is fetched until it is read); `signal` goes with each of its requests. */
  async blob(repo: string, commit: string, file: string, signal?: AbortSignal): Promise<Blob> {
    // a download's requests carry its own signal (its stall timer and the pull's, linked)
    const strict = rangesOnly(signal ? (input, init) => this.call(input, { ...init, signal }) : this.call, `${repo}/${file}`);
    const b = await hubCall(`${repo}/${file}`, () => downloadFile({ ...this.params(repo), fetch: strict, revision: commit, path: file }));
    if (!b) throw new WasteError('E_IO', `${repo}@${commit.slice(0, 12)} has no file ${file}`);
    return b;
  }
}

/** A request that has no signal of its own (the shards' headers, the probe) gives up after this long. */
export const REQUEST_TIMEOUT_MS = 60_000;

/**
 * Our own check on the library's ranged reads: it takes a 200 to a ranged request as the whole file,
 * which it would read into memory (a shard of gigabytes) or, resuming, append at the wrong offset. A
 * server that ignores ranges (or answers another range than asked) is refused with one line, and a
 * request without a signal of its own gets a deadline, so a stalled planning step ends too.
 */
export function rangesOnly(base: typeof fetch, what: string, timeoutMs = REQUEST_TIMEOUT_MS): typeof fetch {
  return async (input, init) => {
    const range = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined)).get('range');
    const res = await base(input, init?.signal ? init : { ...init, signal: AbortSignal.timeout(timeoutMs) });
    if (!range) return res;
    const start = /^bytes=(\d+)-/.exec(range)?.[1];
    const got = res.headers.get('content-range');
    const wrong =
      res.status === 200
        ? 'with the whole file (HTTP 200, not 206)'
        : res.status === 206 && start !== undefined && got !== null && !got.startsWith(`bytes ${start}-`)
          ? `with another range (${got})`
          : undefined;
    if (!wrong) return res;
    await res.body?.cancel().catch(() => {});
    throw new WasteError('E_IO', `${what}: the server answered a ranged request (${range}) ${wrong}; a pull needs ranged reads`);
  };
}

/** The library's errors (HTTP status, network) as one line that names what was asked for. */
export async function hubCall<T>(what: string, f: () => Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof WasteError) throw e;
    const err = e as { statusCode?: number; message?: string; cause?: { code?: string; message?: string } };
    const status = err.statusCode;
    const why =
      status === 401 || status === 403
        ? `access denied (HTTP ${status}): a gated or private repository needs HF_TOKEN`
        : status === 404
          ? 'not found (HTTP 404): check the repository name and revision'
          : `${err.message ?? String(e)}${err.cause?.message ? ` (${err.cause.message})` : ''}`;
    throw new WasteError('E_IO', `${what}: ${why}`);
  }
}
