import { Tokenizer as HfCore } from '@huggingface/tokenizers';
import { WasteError } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import type { TokenDecoder, Tokenizer } from './tokenizer.js';

/**
 * A HuggingFace `tokenizer.json` model, run by @huggingface/tokenizers. Markup mode is the library's
 * own behaviour (added special tokens are recognised in the text); plain mode runs a second
 * instance built without the special added tokens, so their strings are spelled by the model's
 * ordinary vocabulary instead.
 */
export class HfTokenizer implements Tokenizer {
  readonly kind = 'huggingface' as const;
  readonly vocabSize: number;
  readonly specials: ReadonlyMap<number, string>;
  private readonly markup: HfCore;
  private readonly plain: HfCore;
  private readonly byText = new Map<string, number>();

  constructor(json: unknown, config: unknown, source: string) {
    if (!isObject(json) || !isObject(json.model)) throw new WasteError('E_FORMAT', `${source}: not a tokenizer.json (no "model")`);
    const cfg = isObject(config) ? config : {};
    try {
      this.markup = new HfCore(json, cfg);
      const added = Array.isArray(json.added_tokens) ? json.added_tokens : [];
      this.plain = new HfCore({ ...json, added_tokens: added.filter((t) => !(isObject(t) && t.special === true)) }, cfg);
    } catch (e) {
      throw new WasteError('E_FORMAT', `${source}: the tokenizer could not be built (${(e as Error).message})`);
    }
    const specials = new Map<number, string>();
    for (const [id, t] of this.markup.get_added_tokens_decoder()) {
      if (t.special) {
        specials.set(id, t.content);
        this.byText.set(t.content, id);
      }
    }
    this.specials = specials;
    let top = 0;
    for (const id of this.markup.get_vocab(true).values()) top = Math.max(top, id);
    this.vocabSize = top + 1;
  }

  encode(text: string, opts: { markup?: boolean } = {}): number[] {
    return (opts.markup ? this.markup : this.plain).encode(text, { add_special_tokens: false }).ids;
  }

  decode(ids: ArrayLike<number>): string {
    return this.markup.decode(Array.from(ids), { skip_special_tokens: false, clean_up_tokenization_spaces: false });
  }

  specialId(text: string): number | undefined {
    return this.byText.get(text);
  }

  /** The UTF-8 of the token decoded alone: exact for whole characters (a byte-fallback piece decodes to U+FFFD). */
  tokenBytes(id: number): Uint8Array {
    return new TextEncoder().encode(this.decode([id]));
  }

  /**
   * Tokens of a HuggingFace model are not byte strings in general (byte-level "Ġ" symbols,
   * sentencepiece "▁" and byte fallback), so text is decoded from the ids since the last emitted
   * piece and released once it no longer ends in an incomplete character.
   */
  decoder(): TokenDecoder {
    let pending: number[] = [];
    let emitted = '';
    return {
      push: (id) => {
        pending.push(id);
        const text = this.decode(pending);
        if (text.endsWith('\uFFFD')) return '';
        const piece = text.slice(emitted.length);
        // keep a little context so a decoder that joins tokens (spaces, prefixes) sees its neighbour
        if (pending.length > 8) {
          pending = pending.slice(-4);
          emitted = this.decode(pending);
        } else emitted = text;
        return piece;
      },
      flush: () => {
        const text = this.decode(pending);
        const piece = text.slice(emitted.length);
        pending = [];
        emitted = '';
        return piece;
      },
    };
  }
}
