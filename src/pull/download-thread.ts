import { Worker } from 'node:worker_threads';
import { WasteError, type WasteErrorCode } from '../util/errors.js';
import type { HubFile } from './hub.js';

/** What the download thread is asked, and answers. */
export interface FetchJob {
  id: number;
  repo: string;
  commit: string;
  file: HubFile;
  dest: string;
}
export type FetchReply =
  | { kind: 'bytes'; id: number }
  | { kind: 'log'; line: string }
  | { kind: 'done'; id: number }
  | { kind: 'failed'; id: number; code: WasteErrorCode; message: string };

/** What the thread is started with: the hub's address and token (a custom fetch cannot cross threads). */
export interface DownloadThreadInit {
  endpoint: string;
  token?: string;
  stallMs?: number;
  attempts?: number;
  retryMs?: number;
  /** [0]: bytes that arrived less bad copies thrown away (the progress bar's), [1]: bytes fetched. */
  counters: SharedArrayBuffer;
}

/** How long a stopping thread gets to unwind its download before it is terminated. */
const CLOSE_MS = 5000;

interface Pending {
  resolve: () => void;
  reject: (e: Error) => void;
}

/**
 * Shards downloaded on a thread of their own, so that a layer converting on the main thread (a
 * synchronous job of seconds to minutes) does not hold up the next shard's download. The thread
 * runs `downloadFile` as the main thread would; the bytes it counts are in shared memory, so the
 * progress bar reads them even while the main thread converts. A thread that dies fails what it
 * was fetching with one error instead of leaving it waiting.
 */
export class DownloadThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private readonly counts: BigInt64Array;
  private nextId = 0;
  private dead: string | undefined;

  constructor(
    init: Omit<DownloadThreadInit, 'counters'>,
    private readonly onBytes: (file: string) => void,
    private readonly log: (line: string) => void,
  ) {
    const counters = new SharedArrayBuffer(16);
    this.counts = new BigInt64Array(counters);
    this.worker = new Worker(new URL('./download-worker.js', import.meta.url), { workerData: { ...init, counters } satisfies DownloadThreadInit });
    this.worker.on('message', (r: FetchReply) => this.reply(r));
    this.worker.on('error', (e) => this.lost(`the download thread failed (${e.message})`));
    this.worker.on('exit', (code) => this.lost(`the download thread stopped (exit ${code})`));
  }

  private readonly files = new Map<number, string>();

  /** Bytes that arrived (less copies thrown away), and bytes fetched, since the thread started. */
  get arrived(): number {
    return Number(Atomics.load(this.counts, 0));
  }

  get fetched(): number {
    return Number(Atomics.load(this.counts, 1));
  }

  fetch(repo: string, commit: string, file: HubFile, dest: string): Promise<void> {
    if (this.dead) return Promise.reject(new WasteError('E_IO', this.dead));
    const id = this.nextId++;
    this.files.set(id, file.path);
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, repo, commit, file, dest } satisfies FetchJob);
    });
  }

  private reply(r: FetchReply): void {
    if (r.kind === 'log') return this.log(r.line);
    if (r.kind === 'bytes') return this.onBytes(this.files.get(r.id) ?? '');
    const p = this.pending.get(r.id);
    this.pending.delete(r.id);
    this.files.delete(r.id);
    if (!p) return;
    if (r.kind === 'done') p.resolve();
    else p.reject(new WasteError(r.code, r.message));
  }

  private lost(why: string): void {
    this.dead ??= why;
    for (const p of this.pending.values()) p.reject(new WasteError('E_IO', why));
    this.pending.clear();
  }

  /** Stop the thread; a download it was making stays as its `.part` file, resumed by the next run. */
  async close(): Promise<void> {
    this.dead ??= 'the download thread was closed';
    // asked to stop first, so a download in progress closes its file; terminated if it does not
    const exited = new Promise<void>((res) => this.worker.once('exit', () => res()));
    this.worker.postMessage({ kind: 'stop' });
    const timer = new Promise<'late'>((res) => setTimeout(res, CLOSE_MS, 'late').unref());
    if ((await Promise.race([exited, timer])) === 'late') await this.worker.terminate();
  }
}
