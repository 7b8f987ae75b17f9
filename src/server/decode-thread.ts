import { Worker } from 'node:worker_threads';
import type { RgbImage } from '../image/preprocess.js';
import { WasteError } from '../util/errors.js';

/** What the decoder thread is asked, and answers. */
export interface DecodeJob {
  id: number;
  bytes: Uint8Array;
  name: string;
  maxPixels: number;
}
export type DecodeReply = { id: number; image: RgbImage } | { id: number; error: { message: string; image: boolean } };

interface Pending {
  job: DecodeJob;
  resolve: (img: RgbImage) => void;
  reject: (e: Error) => void;
}

/**
 * Images decoded on a thread of their own, one at a time, in the order asked. A decode that
 * kills its thread (memory) or outlasts `deadlineMs` is that image's E_IMAGE, and the next image
 * gets a new thread: no image can stall or take down the server.
 */
export class DecoderThread {
  private worker: Worker | undefined;
  private readonly waiting: Pending[] = [];
  private current: (Pending & { timer: NodeJS.Timeout }) | undefined;
  private nextId = 0;
  private closed = false;

  constructor(private readonly deadlineMs: number) {}

  /** Images being decoded or waiting for the thread. */
  get pending(): number {
    return this.waiting.length + (this.current ? 1 : 0);
  }

  decode(bytes: Uint8Array, name: string, maxPixels: number): Promise<RgbImage> {
    if (this.closed) return Promise.reject(new WasteError('E_STATE', 'the image decoder has been closed'));
    return new Promise((resolve, reject) => {
      this.waiting.push({ job: { id: this.nextId++, bytes, name, maxPixels }, resolve, reject });
      this.pump();
    });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(new URL('./decode-worker.js', import.meta.url), { resourceLimits: { maxOldGenerationSizeMb: 512 } });
    // an idle decoder keeps no process alive
    w.unref();
    w.on('message', (r: DecodeReply) => this.settle(w, r));
    w.on('error', (e) => this.lost(w, `the decoder failed (${e.message})`));
    w.on('exit', (code) => this.lost(w, `the decoder stopped (exit ${code})`));
    return (this.worker = w);
  }

  private pump(): void {
    if (this.current || this.closed) return;
    const next = this.waiting.shift();
    if (!next) return;
    const w = this.thread();
    const timer = setTimeout(() => {
      this.lost(w, `decoding took more than ${this.deadlineMs / 1000} s`);
      void w.terminate();
    }, this.deadlineMs);
    this.current = { ...next, timer };
    w.postMessage(next.job);
  }

  private settle(w: Worker, r: DecodeReply): void {
    const c = this.current;
    if (w !== this.worker || !c || c.job.id !== r.id) return;
    clearTimeout(c.timer);
    this.current = undefined;
    if ('image' in r) c.resolve(r.image);
    else c.reject(new WasteError(r.error.image ? 'E_IMAGE' : 'E_STATE', r.error.message));
    this.pump();
  }

  /** The thread is gone or given up on: its image fails, the next gets a new thread. */
  private lost(w: Worker, why: string): void {
    if (w !== this.worker) return;
    this.worker = undefined;
    const c = this.current;
    this.current = undefined;
    if (c) {
      clearTimeout(c.timer);
      c.reject(new WasteError('E_IMAGE', `${c.job.name}: cannot decode this image (${why})`));
    }
    this.pump();
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    this.worker = undefined;
    const gone = new WasteError('E_STATE', 'the image decoder has been closed');
    if (this.current) {
      clearTimeout(this.current.timer);
      this.current.reject(gone);
      this.current = undefined;
    }
    for (const p of this.waiting.splice(0)) p.reject(gone);
    await w?.terminate();
  }
}
