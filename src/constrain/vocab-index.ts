import { ByteTrie } from './trie.js';
import type { TokenVocab } from './vocab.js';

/**
 * What masking needs of a vocabulary, built once per vocabulary object (a WeakMap keeps it with
 * the object): tries of the ordinary tokens, and the "plain" tokens — those that are nothing but
 * string text (no quote, backslash or control byte; valid UTF-8, perhaps ending inside a character).
 * Inside a JSON string that any text may extend, every plain token is allowed outright, so the trie
 * walk there needs to visit only the others.
 */
export interface VocabIndex {
  /** Every ordinary (non-special) token with bytes. */
  readonly all: ByteTrie;
  /** The ordinary tokens that are not plain. */
  readonly other: ByteTrie;
  /** Plain tokens by the number of characters they begin, fewest first. */
  readonly plainIds: Int32Array;
  readonly plainChars: Int32Array;
  /** 1 for a plain token, by id; and the most characters one begins. */
  readonly isPlain: Uint8Array;
  readonly maxPlainChars: number;
  readonly specials: readonly { id: number; bytes: Uint8Array }[];
}

const cache = new WeakMap<TokenVocab, VocabIndex>();

export function vocabIndex(vocab: TokenVocab): VocabIndex {
  let index = cache.get(vocab);
  if (!index) {
    index = build(vocab);
    cache.set(vocab, index);
  }
  return index;
}

function build(vocab: TokenVocab): VocabIndex {
  const all: number[] = [];
  const other: number[] = [];
  const plain: { id: number; chars: number }[] = [];
  const specials: { id: number; bytes: Uint8Array }[] = [];
  for (let id = 0; id < vocab.size; id++) {
    const b = vocab.bytes(id);
    if (b.length === 0) continue;
    if (vocab.isSpecial(id)) {
      specials.push({ id, bytes: b });
      continue;
    }
    all.push(id);
    const chars = plainChars(b);
    if (chars < 0) other.push(id);
    else plain.push({ id, chars });
  }
  plain.sort((a, b) => a.chars - b.chars || a.id - b.id);
  const bytesOf = (id: number) => vocab.bytes(id);
  const isPlain = new Uint8Array(vocab.size);
  for (const p of plain) isPlain[p.id] = 1;
  return {
    isPlain,
    maxPlainChars: plain.length ? plain[plain.length - 1].chars : 0,
    all: new ByteTrie(all, bytesOf),
    other: new ByteTrie(other, bytesOf),
    plainIds: Int32Array.from(plain, (p) => p.id),
    plainChars: Int32Array.from(plain, (p) => p.chars),
    specials,
  };
}

/**
 * The characters a token begins when read as JSON string text from a character boundary, or -1
 * when it is not plain text. The last character may be incomplete (a byte-level token can end
 * inside one): it counts, since a string's length is checked as each character begins.
 */
export function plainChars(b: Uint8Array): number {
  let chars = 0;
  for (let i = 0; i < b.length; ) {
    const c = b[i];
    if (c < 0x80) {
      if (c < 0x20 || c === 0x22 || c === 0x5c) return -1;
      chars++;
      i++;
      continue;
    }
    const [n, lo, hi] = utf8Lead(c);
    if (n === 0) return -1;
    chars++;
    for (let j = 1; j <= n && i + j < b.length; j++) {
      const x = b[i + j];
      if (x < (j === 1 ? lo : 0x80) || x > (j === 1 ? hi : 0xbf)) return -1;
    }
    i += n + 1;
  }
  return chars;
}

/**
 * For a UTF-8 lead byte: how many continuation bytes follow, and the range of the first one
 * (narrowed to exclude overlong forms, surrogates and code points past U+10FFFF). n = 0: not a lead.
 */
export function utf8Lead(c: number): [n: number, lo: number, hi: number] {
  if (c >= 0xc2 && c <= 0xdf) return [1, 0x80, 0xbf];
  if (c === 0xe0) return [2, 0xa0, 0xbf];
  if (c === 0xed) return [2, 0x80, 0x9f];
  if (c >= 0xe1 && c <= 0xef) return [2, 0x80, 0xbf];
  if (c === 0xf0) return [3, 0x90, 0xbf];
  if (c >= 0xf1 && c <= 0xf3) return [3, 0x80, 0xbf];
  if (c === 0xf4) return [3, 0x80, 0x8f];
  return [0, 0, 0];
}
