/**
 * What the engine needs of a tokenizer. Two modes of encoding: plain, for anything a user or a
 * client wrote — control-token strings in it are ordinary text, so nobody can forge a turn marker —
 * and markup, for chat templates, in which the special tokens' strings become their ids.
 */
export interface Tokenizer {
  readonly kind: 'tiktoken' | 'huggingface';
  /** One past the highest id. */
  readonly vocabSize: number;
  /** Special tokens by id (their text). */
  readonly specials: ReadonlyMap<number, string>;
  encode(text: string, opts?: { markup?: boolean }): number[];
  /** Text of a sequence of ids (special tokens as their text). */
  decode(ids: ArrayLike<number>): string;
  /** The id of a special token's text, if it is one. */
  specialId(text: string): number | undefined;
  /** A streaming decoder: pieces of text as ids arrive, never a broken UTF-8 sequence. */
  decoder(): TokenDecoder;
  /**
   * The bytes one token stands for (a special token's: its text). Constrained sampling walks the
   * vocabulary by these; a byte-level BPE token may be part of a UTF-8 character.
   */
  tokenBytes(id: number): Uint8Array;
}

export interface TokenDecoder {
  /** Text completed by this id (may be empty while a character's bytes are still arriving). */
  push(id: number): string;
  /** Whatever is held back at the end (an incomplete character becomes U+FFFD). */
  flush(): string;
}
