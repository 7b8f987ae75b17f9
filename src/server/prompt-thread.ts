import { Worker } from 'node:worker_threads';
import type { ChatMessage, EncodeOptions, NativeChatFormat } from '../chat/format.js';
import { WasteError, type WasteErrorCode } from '../util/errors.js';

/** What the prompt thread is given once: where the model's tokenizer and chat format are. */
export interface PromptThreadInit {
  dir: string;
  native?: NativeChatFormat;
  modelVocab: number;
}

/** A conversation to render in the chat format, or a text to tokenize as plain text. */
export type PromptJob = { id: number; messages: ChatMessage[]; opts: EncodeOptions } | { id: number; text: string };
export type PromptReply = { id: number; ids: Int32Array } | { id: number; error: { code: WasteErrorCode; message: string } };

interface Pending {
  job: PromptJob;
  resolve: (ids: number[]) => void;
  reject: (e: Error) => void;
}

/**
 * Large conversations rendered and tokenized on a thread of their own, one at a time, in the order
 * asked: a body of megabytes of text takes seconds to tokenize, which on the server's own thread
 * would stall every request, /health included. The thread loads the same tokenizer and chat format
 * the model did (the same code, the same files), so the ids are the ones rendering on the server's
 * thread would give. A thread that fails is replaced for the next conversation.
 */
export class PromptThread {
  private worker: Worker | undefined;
  private readonly waiting: Pending[] = [];
  private current: Pending | undefined;
  private nextId = 0;
  private closed = false;

  constructor(private readonly init: PromptThreadInit) {}

  /** Conversations being rendered or waiting for the thread. */
  get pending(): number {
    return this.waiting.length + (this.current ? 1 : 0);
  }

  encode(messages: ChatMessage[], opts: EncodeOptions): Promise<number[]> {
    return this.ask({ id: this.nextId++, messages, opts });
  }

  /** A text tokenized as plain text (control-token strings are ordinary text), as the model's tokenizer's `encode` does. */
  encodeText(text: string): Promise<number[]> {
    return this.ask({ id: this.nextId++, text });
  }

  private ask(job: PromptJob): Promise<number[]> {
    if (this.closed) return Promise.reject(new WasteError('E_STATE', 'the prompt thread has been closed'));
    return new Promise((resolve, reject) => {
      this.waiting.push({ job, resolve, reject });
      this.pump();
    });
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(new URL('./prompt-worker.js', import.meta.url), { workerData: this.init });
    // an idle thread keeps no process alive
    w.unref();
    w.on('message', (r: PromptReply) => this.settle(w, r));
    w.on('error', (e) => this.lost(w, `the prompt thread failed (${e.message})`));
    w.on('exit', (code) => this.lost(w, `the prompt thread stopped (exit ${code})`));
    return (this.worker = w);
  }

  private pump(): void {
    if (this.current || this.closed) return;
    const next = this.waiting.shift();
    if (!next) return;
    this.current = next;
    this.thread().postMessage(next.job);
  }

  private settle(w: Worker, r: PromptReply): void {
    const c = this.current;
    if (w !== this.worker || !c || c.job.id !== r.id) return;
    this.current = undefined;
    if ('ids' in r) c.resolve(Array.from(r.ids));
    else c.reject(new WasteError(r.error.code, r.error.message));
    this.pump();
  }

  private lost(w: Worker, why: string): void {
    if (w !== this.worker) return;
    this.worker = undefined;
    const c = this.current;
    this.current = undefined;
    c?.reject(new WasteError('E_STATE', why));
    this.pump();
  }

  async close(): Promise<void> {
    this.closed = true;
    const w = this.worker;
    this.worker = undefined;
    const gone = new WasteError('E_STATE', 'the prompt thread has been closed');
    this.current?.reject(gone);
    this.current = undefined;
    for (const p of this.waiting.splice(0)) p.reject(gone);
    await w?.terminate();
  }
}
