/**
 * The download thread's side (see download-thread.ts): one shard at a time, in the order asked, each
 * with `downloadFile` — resumed, stall-timed, retried and hash-checked as on the main thread.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { WasteError } from '../util/errors.js';
import { downloadFile } from './download.js';
import type { DownloadThreadInit, FetchJob, FetchReply } from './download-thread.js';
import { Hub } from './hub.js';

const init = workerData as DownloadThreadInit;
const counts = new BigInt64Array(init.counters);
const hub = new Hub({ endpoint: init.endpoint, token: init.token });
const post = (r: FetchReply) => parentPort!.postMessage(r);
/** Progress messages at most this often (the counters themselves are exact at every chunk). */
const TELL_MS = 100;

let queue = Promise.resolve();
/** Aborted by a stop: the download in progress unwinds (its file closed, its .part kept), none starts after. */
const stopping = new AbortController();
parentPort!.on('message', (m: FetchJob | { kind: 'stop' }) => {
  if ('kind' in m) {
    stopping.abort(new WasteError('E_IO', 'the download thread was closed'));
    // ends this thread only (a worker's process.exit), once the download in progress has unwound
    void queue.then(() => process.exit(0));
    return;
  }
  queue = queue.then(() => run(m));
});

async function run(job: FetchJob): Promise<void> {
  let told = 0;
  try {
    if (stopping.signal.aborted) throw stopping.signal.reason;
    await downloadFile(hub, job.repo, job.commit, job.file, job.dest, {
      onBytes: (n) => {
        Atomics.add(counts, 0, BigInt(n));
        if (n > 0) Atomics.add(counts, 1, BigInt(n));
        const now = performance.now();
        if (now - told >= TELL_MS) {
          told = now;
          post({ kind: 'bytes', id: job.id });
        }
      },
      stallMs: init.stallMs,
      attempts: init.attempts,
      retryMs: init.retryMs,
      log: (line) => post({ kind: 'log', line }),
      signal: stopping.signal,
    });
    post({ kind: 'done', id: job.id });
  } catch (e) {
    post({ kind: 'failed', id: job.id, code: e instanceof WasteError ? e.code : 'E_IO', message: e instanceof Error ? e.message : String(e) });
  }
}
