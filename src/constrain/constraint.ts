import { WasteError } from '../util/errors.js';
import { BlankRuns } from './blank-runs.js';
import type { Grammar } from './grammar.js';
import { Sink, type Stack, type StateSet, step, stepInto } from './machine.js';
import { type GrammarOptions, compileGrammar } from './program.js';
import type { ByteTrie } from './trie.js';
import { vocabIndex } from './vocab-index.js';
import type { TokenVocab } from './vocab.js';

export interface TokenConstraint {
  /**
   * Logits in which every token that cannot continue the grammar is -Infinity (the input is not
   * changed; the array returned may be reused by the next call, so use it before then). End
   * tokens are allowed only when the grammar is complete, and then nothing else is: a grammar that
   * could either end or go on (a bare number at the top, an open-ended repeat last) ends at the
   * first point it can.
   */
  mask(logits: Float32Array): Float32Array;
  /** Advance by the sampled token (WasteError E_ARG if it was not allowed). */
  accept(token: number): void;
  /** The grammar has been matched completely. */
  readonly complete: boolean;
}

/**
 * Constrain sampling to the grammar. Throws E_ARG when the grammar or a schema in it is outside
 * what can be enforced (see schema.ts) or can never be matched.
 */
export function grammarConstraint(vocab: TokenVocab, grammar: Grammar, endTokens: readonly number[], opts: GrammarOptions = {}): TokenConstraint {
  return new GrammarConstraint(vocab, grammar, endTokens, opts);
}

class GrammarConstraint implements TokenConstraint {
  private state: StateSet;
  private ended = false;
  private readonly ends: ReadonlySet<number>;
  private readonly isEnd: Uint8Array;
  private out: Float32Array | undefined;
  private readonly blanks: BlankRuns;

  constructor(
    private readonly vocab: TokenVocab,
    grammar: Grammar,
    endTokens: readonly number[],
    opts: GrammarOptions,
  ) {
    const piece = compileGrammar(grammar, opts);
    this.blanks = new BlankRuns(vocab);
    this.ends = new Set(endTokens);
    this.isEnd = new Uint8Array(vocab.size);
    for (const id of endTokens) if (id >= 0 && id < vocab.size) this.isEnd[id] = 1;
    const k = new Sink();
    piece.enter(null, k);
    this.state = k;
  }

  get complete(): boolean {
    return this.state.accept;
  }

  mask(logits: Float32Array): Float32Array {
    if (this.ended) throw new WasteError('E_STATE', 'constrained sampling: an end token was already accepted');
    // one buffer per constraint, not a vocabulary-sized allocation per token
    if (this.out?.length !== logits.length) this.out = new Float32Array(logits.length);
    const out = this.out.fill(-Infinity);
    const limit = Math.min(logits.length, this.vocab.size);
    let allowed = 0;
    const allow = (id: number) => {
      if (id < limit && !this.isEnd[id]) {
        out[id] = logits[id];
        allowed++;
      }
    };
    if (this.state.accept) {
      for (const id of this.ends) {
        if (id < limit) {
          out[id] = logits[id];
          allowed++;
        }
      }
      if (!allowed) throw new WasteError('E_STATE', 'constrained sampling: the grammar is complete and no end token was given (stop when complete is true)');
      return out;
    }
    const index = vocabIndex(this.vocab);
    // configurations inside free string text allow every plain token that fits outright; the
    // trie walk for them needs only the tokens that are not plain
    const free: Stack[] = [];
    const rest: Stack[] = [];
    let room = -1;
    for (const s of this.state.stacks) {
      const f = s.frame.freeChars();
      if (f >= 0) {
        free.push(s);
        room = Math.max(room, f);
      } else rest.push(s);
    }
    if (free.length) {
      // the hot loop of a reply's string text: up to the whole vocabulary
      const isEnd = this.isEnd;
      if (room >= index.maxPlainChars) {
        // every plain token: one pass in id order
        const isPlain = index.isPlain;
        for (let id = 0; id < limit; id++) {
          if (isPlain[id] && !isEnd[id]) {
            out[id] = logits[id];
            allowed++;
          }
        }
      } else {
        const { plainChars: chars, plainIds: ids } = index;
        for (let i = 0; i < chars.length && chars[i] <= room; i++) {
          const id = ids[i];
          if (id < limit && !isEnd[id]) {
            out[id] = logits[id];
            allowed++;
          }
        }
      }
      walk(index.other, { stacks: free, accept: false }, allow);
    }
    if (rest.length) walk(index.all, { stacks: rest, accept: false }, allow);
    if (this.state.stacks.some((s) => s.frame.literal)) {
      for (const sp of index.specials) if (follow(this.state, sp.bytes, true)) allow(sp.id);
    }
    if (!allowed) throw new WasteError('E_STATE', 'constrained sampling: no token of the vocabulary can continue the grammar here (the vocabulary lacks the bytes it needs)');
    this.blanks.restrict(out, allowed);
    return out;
  }

  accept(token: number): void {
    if (this.ended) throw new WasteError('E_STATE', 'constrained sampling: an end token was already accepted');
    if (this.state.accept) {
      if (!this.ends.has(token)) throw new WasteError('E_ARG', `constrained sampling: token ${token} ${this.show(token)} after the grammar is complete (only end tokens may follow)`);
      this.ended = true;
      return;
    }
    if (this.ends.has(token)) throw new WasteError('E_ARG', `constrained sampling: end token ${token} before the grammar is complete`);
    const bytes = token >= 0 && token < this.vocab.size ? this.vocab.bytes(token) : new Uint8Array(0);
    const next = bytes.length ? follow(this.state, bytes, this.vocab.isSpecial(token)) : null;
    if (!next) throw new WasteError('E_ARG', `constrained sampling: token ${token} ${this.show(token)} cannot continue the grammar here`);
    this.state = next;
    this.blanks.accept(token);
  }

  private show(token: number): string {
    if (token < 0 || token >= this.vocab.size) return '(not in the vocabulary)';
    return JSON.stringify(new TextDecoder().decode(this.vocab.bytes(token)));
  }
}

function follow(set: StateSet, bytes: Uint8Array, litOnly: boolean): StateSet | null {
  let cur: StateSet | null = set;
  for (let i = 0; i < bytes.length && cur; i++) cur = step(cur, bytes[i], litOnly);
  return cur;
}

/** Allow every token of the trie the configurations can read, dropping a subtree at the first byte none can. */
function walk(trie: ByteTrie, set: StateSet, allow: (id: number) => void): void {
  const { byte, firstChild, nextSibling, tokStart, tokCount, tokens } = trie;
  // one sink per depth, refilled for each sibling: most bytes are refused, and then nothing is kept
  const sinks: Sink[] = [];
  const visit = (node: number, cur: StateSet, depth: number): void => {
    const next = (sinks[depth] ??= new Sink());
    for (let c = firstChild[node]; c >= 0; c = nextSibling[c]) {
      if (!stepInto(cur, byte[c], false, next)) continue;
      for (let i = tokStart[c], end = i + tokCount[c]; i < end; i++) allow(tokens[i]);
      if (next.stacks.length && firstChild[c] >= 0) visit(c, next, depth + 1);
    }
  };
  visit(0, set, 0);
}
