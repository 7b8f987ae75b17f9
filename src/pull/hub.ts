import { downloadFile, listFiles, modelInfo } from '@huggingface/hub';
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

  constructor(opts: HubOptions = {}) {
    this.endpoint = (opts.endpoint ?? process.env.HF_ENDPOINT ?? 'https://huggingface.co').replace(/\/+$/, '');
    const t = opts.token ?? process.env.HF_TOKEN;
    this.token = t && t !== '' ? t : undefined;
    if (this.token && !this.token.startsWith('hf_')) throw new WasteError('E_ARG', 'HF_TOKEN does not look like a HuggingFace access token (they start with hf_)');
    this.fetchFn = opts.fetch;
  }

  private params(repo: string) {
    return { repo: { type: 'model' as const, name: repo }, hubUrl: this.endpoint, ...(this.token ? { accessToken: this.token } : {}), ...(this.fetchFn ? { fetch: this.fetchFn } : {}) };
  }

  /** The commit a revision (branch, tag or commit) names now: a pull reads every file from that one commit. */
  async commitOf(repo: string, revision: string): Promise<string> {
    const info = await hubCall(`${repo}@${revision}`, () =>
      modelInfo({ name: repo, revision, hubUrl: this.endpoint, additionalFields: ['sha'], ...(this.token ? { accessToken: this.token } : {}), ...(this.fetchFn ? { fetch: this.fetchFn } : {}) }),
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

  /** The file as a Blob read over HTTP (nothing is fetched until it is read). */
  async blob(repo: string, commit: string, file: string, fetchFn?: typeof fetch): Promise<Blob> {
    const b = await hubCall(`${repo}/${file}`, () => downloadFile({ ...this.params(repo), ...(fetchFn ? { fetch: fetchFn } : {}), revision: commit, path: file }));
    if (!b) throw new WasteError('E_IO', `${repo}@${commit.slice(0, 12)} has no file ${file}`);
    return b;
  }
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
