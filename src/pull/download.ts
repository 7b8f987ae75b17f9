import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { sleep } from '../util/abort.js';
import { WasteError, fromSystemError } from '../util/errors.js';
import type { Hub, HubFile } from './hub.js';

export interface DownloadOptions {
  /** Bytes that arrived (for the progress bar); negative when a bad copy is thrown away. */
  onBytes?: (n: number) => void;
  /** A connection that sends nothing for this long is dropped and tried again (default 60 s). */
  stallMs?: number;
  /** Attempts per file before giving up (default 6), with doubling pauses from `retryMs` (default 1 s). */
  attempts?: number;
  retryMs?: number;
  log?: (line: string) => void;
  signal?: AbortSignal;
}

/**
 * Fetch one file of the repository to `dest`: into `dest.part` first, resumed from its length
 * after a kill or a dropped connection, checked against the hub's hash, then renamed. A stalled
 * connection is aborted and resumed; a copy that fails its hash is deleted and fetched once more
 * from the start. The library gives the Blob and its ranged reads (`slice`); what it does not do —
 * resuming a partial file, a stall timeout, retries, hash checks — is here.
 */
export async function downloadFile(hub: Hub, repo: string, commit: string, file: HubFile, dest: string, opts: DownloadOptions = {}): Promise<void> {
  const part = `${dest}.part`;
  const attempts = opts.attempts ?? 6;
  let pause = opts.retryMs ?? 1000;
  let refetched = false;
  for (let attempt = 1; ; attempt++) {
    try {
      await fetchOnce(hub, repo, commit, file, part, opts);
      const got = await hashOf(part, file);
      if (got !== undefined) {
        const expected = file.sha256 ?? file.gitOid;
        opts.onBytes?.(-file.size);
        fs.rmSync(part, { force: true });
        if (refetched) throw new WasteError('E_IO', `${repo}/${file.path}: the download does not match the hub's hash twice (${got} against ${expected}); nothing kept`);
        refetched = true;
        opts.log?.(`${file.path}: the download does not match the hub's hash; fetching it again`);
        attempt = 0;
        continue;
      }
      try {
        fs.renameSync(part, dest);
      } catch (e) {
        throw fromSystemError(dest, e);
      }
      return;
    } catch (e) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      const fatal = e instanceof WasteError && (e.code !== 'E_IO' || /HTTP 40[134]|hash/.test(e.message));
      if (fatal || attempt >= attempts) {
        const msg = e instanceof Error ? e.message : String(e);
        throw e instanceof WasteError && msg.includes(file.path) ? e : new WasteError(e instanceof WasteError ? e.code : 'E_IO', `${repo}/${file.path}: ${msg}`);
      }
      opts.log?.(`${file.path}: ${e instanceof Error ? e.message : String(e)}; trying again in ${(pause / 1000).toFixed(1)} s`);
      await sleep(pause, opts.signal);
      pause = Math.min(pause * 2, 60_000);
    }
  }
}

/** One connection: the bytes from `part`'s length to the end appended to it. */
async function fetchOnce(hub: Hub, repo: string, commit: string, file: HubFile, part: string, opts: DownloadOptions): Promise<void> {
  let have = 0;
  try {
    have = fs.statSync(part).size;
  } catch {
    /* nothing yet */
  }
  if (have > file.size) {
    fs.rmSync(part, { force: true });
    have = 0;
  }
  if (have === file.size) return;
  opts.signal?.throwIfAborted();
  const ac = new AbortController();
  const onAbort = () => ac.abort(opts.signal?.reason);
  opts.signal?.addEventListener('abort', onAbort);
  // every request the library makes for this file carries `ac.signal` (hub.blob): a stall aborts it
  const stallMs = opts.stallMs ?? 60_000;
  let fd: number | undefined;
  try {
    const blob = await hub.blob(repo, commit, file.path, ac.signal);
    if (blob.size !== file.size) throw new WasteError('E_IO', `${file.path}: the hub lists ${file.size} bytes and serves ${blob.size}`);
    const reader = blob.slice(have).stream().getReader();
    fd = fs.openSync(part, have ? 'r+' : 'w');
    let pos = have;
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const stalled = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          ac.abort();
          reject(new WasteError('E_IO', `no data for ${(stallMs / 1000).toFixed(1)} s`));
        }, stallMs);
      });
      let r: Awaited<ReturnType<typeof reader.read>>;
      try {
        r = await Promise.race([reader.read(), stalled]);
      } finally {
        clearTimeout(timer);
      }
      if (r.done) break;
      const chunk = r.value;
      if (pos + chunk.length > file.size) throw new WasteError('E_IO', `${file.path}: the server sent more than the ${file.size} bytes listed`);
      let done = 0;
      while (done < chunk.length) done += fs.writeSync(fd, chunk, done, chunk.length - done, pos + done);
      pos += chunk.length;
      opts.onBytes?.(chunk.length);
    }
    if (pos !== file.size) throw new WasteError('E_IO', `the connection closed after ${pos} of ${file.size} bytes`);
    fs.fsyncSync(fd);
  } catch (e) {
    if (opts.signal?.aborted) throw opts.signal.reason;
    if (e instanceof WasteError) throw e;
    const err = e as NodeJS.ErrnoException;
    if (typeof err.code === 'string' && err.syscall) throw fromSystemError(part, e);
    throw new WasteError('E_IO', e instanceof Error ? e.message : String(e));
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
    opts.signal?.removeEventListener('abort', onAbort);
    ac.abort();
  }
}

/** undefined when the file matches the hub's hash, else the hash it has. Files the hub gives no hash for pass. */
async function hashOf(file: string, f: HubFile): Promise<string | undefined> {
  if (!f.sha256 && !f.gitOid) return undefined;
  const h = crypto.createHash(f.sha256 ? 'sha256' : 'sha1');
  if (!f.sha256) h.update(`blob ${f.size}\0`);
  for await (const chunk of fs.createReadStream(file, { highWaterMark: 8 << 20 })) h.update(chunk as Buffer);
  const got = h.digest('hex');
  return got === (f.sha256 ?? f.gitOid) ? undefined : got;
}

/** A metadata request (listing, commit, a header) tried again like a download when the network fails. */
export async function withRetries<T>(what: string, f: () => Promise<T>, opts: DownloadOptions = {}): Promise<T> {
  const attempts = opts.attempts ?? 6;
  let pause = opts.retryMs ?? 1000;
  for (let attempt = 1; ; attempt++) {
    try {
      return await f();
    } catch (e) {
      if (opts.signal?.aborted) throw opts.signal.reason;
      const fatal = e instanceof WasteError && (e.code !== 'E_IO' || /HTTP 40[134]/.test(e.message));
      if (fatal || attempt >= attempts) throw e;
      opts.log?.(`${what}: ${e instanceof Error ? e.message : String(e)}; trying again in ${(pause / 1000).toFixed(1)} s`);
      await sleep(pause, opts.signal);
      pause = Math.min(pause * 2, 60_000);
    }
  }
}
