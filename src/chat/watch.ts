import { type TokenConstraint, grammarConstraint } from '../constrain/constraint.js';
import type { Grammar } from '../constrain/grammar.js';
import type { TokenVocab } from '../constrain/vocab.js';

/** Watches a reply's tokens for a marker, as they are accepted. */
export interface Watch {
  /** Whether the reply now ends with what is watched for. */
  push(token: number): boolean;
}

/** A piece of text, however it is spelled: for formats whose markers are read as text (Kimi's, Hermes'). */
export class TextWatch implements Watch {
  private tail: number[] = [];
  private readonly want: Uint8Array;

  constructor(
    private readonly vocab: TokenVocab,
    readonly text: string,
  ) {
    this.want = new TextEncoder().encode(text);
  }

  push(token: number): boolean {
    for (const b of this.vocab.bytes(token)) this.tail.push(b);
    if (this.tail.length > this.want.length) this.tail.splice(0, this.tail.length - this.want.length);
    return this.tail.length === this.want.length && this.tail.every((b, i) => b === this.want[i]);
  }
}

/**
 * Markup made of special tokens and text, for formats whose structure is decided by token id
 * (K3's): a special token matches only itself, and text matches whatever ordinary tokens spell it
 * — so `<|sep|>` spelled as text never triggers, as the reply reader would not read it as a marker.
 */
export class MarkupWatch implements Watch {
  private tail: number[] = [];
  private readonly want: number[];

  /** `pattern`: special token ids (numbers) and texts, in order. */
  constructor(
    private readonly vocab: TokenVocab,
    pattern: readonly (number | string)[],
  ) {
    // one symbol per special token (below zero) and per byte of text
    this.want = pattern.flatMap((p) => (typeof p === 'number' ? [-1 - p] : [...new TextEncoder().encode(p)]));
  }

  push(token: number): boolean {
    if (this.vocab.isSpecial(token)) this.tail.push(-1 - token);
    else for (const b of this.vocab.bytes(token)) this.tail.push(b);
    if (this.tail.length > this.want.length) this.tail.splice(0, this.tail.length - this.want.length);
    return this.tail.length === this.want.length && this.tail.every((b, i) => b === this.want[i]);
  }
}

/**
 * Free text until `watch` fires, then `then` to its end: how a reply thinks first and then answers
 * in JSON, or calls a tool when it chooses to. `holdEnd`: ids that may not end the reply before
 * then (a reply that must still make its call or write its document).
 */
export class After implements TokenConstraint {
  private inner: TokenConstraint | undefined;
  private out: Float32Array | undefined;

  constructor(
    private readonly watch: Watch,
    private readonly then: () => TokenConstraint,
    private readonly holdEnd: readonly number[] = [],
  ) {}

  mask(logits: Float32Array): Float32Array {
    if (this.inner) return this.inner.mask(logits);
    if (!this.holdEnd.length) return logits;
    if (this.out?.length !== logits.length) this.out = new Float32Array(logits.length);
    this.out.set(logits);
    for (const id of this.holdEnd) if (id < logits.length) this.out[id] = -Infinity;
    return this.out;
  }

  accept(token: number): void {
    if (this.inner) return this.inner.accept(token);
    if (this.watch.push(token)) this.inner = this.then();
  }

  get complete(): boolean {
    return this.inner?.complete ?? false;
  }
}

/**
 * A reasoning budget: after `budget` tokens of a reply that starts in the reasoning block, the
 * block is closed — `close` (the grammar of its close marker) is the only thing allowed until it is
 * written — and the turn's own constraint (if any) carries on. A reply that closes the block by
 * itself (`watch` fires) is untouched.
 */
export class ReasoningBudget implements TokenConstraint {
  private used = 0;
  private closed = false;
  private closing: TokenConstraint | undefined;

  constructor(
    private readonly vocab: TokenVocab,
    private readonly watch: Watch,
    private readonly close: Grammar,
    private readonly budget: number,
    private readonly inner: TokenConstraint | undefined,
  ) {
    if (budget <= 0) this.closing = grammarConstraint(vocab, close, []);
  }

  mask(logits: Float32Array): Float32Array {
    if (this.closing) return this.closing.mask(logits);
    return this.inner ? this.inner.mask(logits) : logits;
  }

  accept(token: number): void {
    this.inner?.accept(token);
    if (this.closed) return;
    if (this.closing) {
      this.closing.accept(token);
      if (this.closing.complete) {
        this.closing = undefined;
        this.closed = true;
      }
      return;
    }
    if (this.watch.push(token)) this.closed = true;
    else if (++this.used >= this.budget) this.closing = grammarConstraint(this.vocab, this.close, []);
  }

  get complete(): boolean {
    return this.closed && (this.inner?.complete ?? false);
  }
}
