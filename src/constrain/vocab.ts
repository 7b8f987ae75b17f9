import type { Tokenizer } from '../tokenizer/tokenizer.js';

/** The vocabulary as constrained sampling sees it. */
export interface TokenVocab {
  readonly size: number;
  /** Bytes of token id (a special token's text); see Tokenizer.tokenBytes. Empty = never allowed. */
  bytes(id: number): Uint8Array;
  /** Special (control) tokens: allowed only where a grammar literal matches their whole text. */
  isSpecial(id: number): boolean;
}

const NONE = new Uint8Array(0);

const vocabs = new WeakMap<Tokenizer, TokenVocab>();

/**
 * A tokenizer's vocabulary, read once: the same object for the same tokenizer, so the tries
 * masking builds for it (kept with the vocabulary object) are built once too. An id the
 * tokenizer cannot give bytes for (a gap in the ranks) gets no bytes, so it is never allowed.
 */
export function vocabOf(tok: Tokenizer): TokenVocab {
  let v = vocabs.get(tok);
  if (!v) vocabs.set(tok, (v = read(tok)));
  return v;
}

function read(tok: Tokenizer): TokenVocab {
  const table: Uint8Array[] = new Array(tok.vocabSize);
  for (let id = 0; id < tok.vocabSize; id++) {
    try {
      table[id] = tok.tokenBytes(id);
    } catch {
      table[id] = NONE;
    }
  }
  return {
    size: tok.vocabSize,
    bytes: (id) => table[id] ?? NONE,
    isSpecial: (id) => tok.specials.has(id),
  };
}
