import { WasteError, quoted } from '../util/errors.js';
import { bytePairEncode } from './bpe.js';
import { kimiChunks, kimiPattern } from './pattern.js';
import type { Ranks } from './ranks.js';
import type { TokenDecoder, Tokenizer } from './tokenizer.js';

/** Kimi reserves this many ids after the ranks for special tokens, named or not. */
export const RESERVED_SPECIALS = 256;
/**
 * The longest text a special token may have. Real markers are a few dozen characters
 * (`<|reserved_token_163839|>`); the specials become one regular expression, which V8 cannot
 * compile once one literal in it runs to some hundred thousand characters.
 */
export const MAX_SPECIAL_CHARS = 256;

/**
 * Byte-level BPE by rank (tiktoken's algorithm) with Kimi's pre-tokenizer: text is cut as
 * tokenization_kimi.py cuts it, split by the pattern, and each piece's UTF-8 bytes merged by rank.
 * Special tokens are the named ones (specials.json or tokenizer_config.json) plus
 * `<|reserved_token_{id}|>` for every unnamed id of the reserved block, as the reference names them.
 */
export class TiktokenTokenizer implements Tokenizer {
  readonly kind = 'tiktoken' as const;
  readonly vocabSize: number;
  readonly specials: ReadonlyMap<number, string>;
  private readonly byText = new Map<string, number>();
  private readonly specialPattern: RegExp | undefined;
  private readonly pattern = kimiPattern();
  private readonly encoder = new TextEncoder();

  constructor(
    private readonly ranks: Ranks,
    named: { id: number; text: string }[],
    private readonly source: string,
    /** The model's vocabulary size, when known: the reserved block stops there (a small model has fewer). */
    modelVocab?: number,
  ) {
    const specials = new Map<number, string>();
    const reservedEnd = Math.min(ranks.size + RESERVED_SPECIALS, modelVocab ?? Infinity);
    for (let id = ranks.size; id < reservedEnd; id++) specials.set(id, `<|reserved_token_${id}|>`);
    for (const { id, text } of named) {
      if (ranks.bytes[id]) throw new WasteError('E_FORMAT', `${source}: special token ${quoted(text)} has id ${id}, which is an ordinary token`);
      if (!text) throw new WasteError('E_FORMAT', `${source}: special token ${id} has no text`);
      if (text.length > MAX_SPECIAL_CHARS)
        throw new WasteError('E_FORMAT', `${source}: special token ${id}'s text is ${text.length} characters long, more than the ${MAX_SPECIAL_CHARS} a special token may have`);
      specials.set(id, text);
    }
    const seen = new Map<string, number>();
    for (const { id, text } of named) {
      const other = seen.get(text);
      if (other !== undefined && other !== id) throw new WasteError('E_FORMAT', `${source}: special token ${quoted(text)} has two ids, ${other} and ${id}`);
      seen.set(text, id);
    }
    for (const [id, text] of specials) this.byText.set(text, id);
    this.specials = specials;
    // a loop, not Math.max(...ids): a file may name more specials than a call takes arguments
    let top = ranks.size;
    for (const id of specials.keys()) if (id > top) top = id;
    this.vocabSize = top + 1;
    // longest first, so a marker that begins another one never cuts it short
    const texts = [...this.byText.keys()].sort((a, b) => b.length - a.length || (a < b ? -1 : 1));
    this.specialPattern = texts.length ? new RegExp(texts.map(escapeRegExp).join('|'), 'g') : undefined;
  }

  encode(text: string, opts: { markup?: boolean } = {}): number[] {
    const out: number[] = [];
    for (const chunk of kimiChunks(text)) {
      if (!opts.markup || !this.specialPattern) {
        this.encodeOrdinary(chunk, out);
        continue;
      }
      let last = 0;
      for (const m of chunk.matchAll(this.specialPattern)) {
        this.encodeOrdinary(chunk.slice(last, m.index), out);
        out.push(this.byText.get(m[0])!);
        last = m.index! + m[0].length;
      }
      this.encodeOrdinary(chunk.slice(last), out);
    }
    return out;
  }

  private encodeOrdinary(text: string, out: number[]): void {
    if (!text) return;
    for (const m of text.matchAll(this.pattern)) {
      const piece = m[0];
      bytePairEncode(isAscii(piece) ? piece : latin1(this.encoder.encode(piece)), this.ranks.byBytes, out);
    }
  }

  decode(ids: ArrayLike<number>): string {
    const d = this.decoder();
    let s = '';
    for (let i = 0; i < ids.length; i++) s += d.push(ids[i]);
    return s + d.flush();
  }

  /** The bytes of one token (a special token's are its text in UTF-8). */
  tokenBytes(id: number): Uint8Array {
    const b = this.ranks.bytes[id];
    if (b) return b;
    const s = this.specials.get(id);
    if (s !== undefined) return this.encoder.encode(s);
    throw new WasteError('E_ARG', `token id ${id} is not in the vocabulary of ${this.source} (0..${this.vocabSize - 1})`);
  }

  specialId(text: string): number | undefined {
    return this.byText.get(text);
  }

  decoder(): TokenDecoder {
    const utf8 = new TextDecoder('utf-8', { fatal: false });
    return {
      push: (id) => utf8.decode(this.tokenBytes(id), { stream: true }),
      flush: () => utf8.decode(),
    };
  }
}

function isAscii(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return false;
  return true;
}

/** Bytes as a string of one char per byte: the key the rank map uses. */
function latin1(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.length).toString('latin1');
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&');
}
