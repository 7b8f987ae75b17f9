import { Frame, type Sink, Stack } from './machine.js';

/*
 * The lexical pieces of JSON (RFC 8259) as frames: string text, numbers, whitespace and single
 * punctuation bytes. Each is immutable; a step makes a new frame (small ones are shared).
 */

// --- string text -------------------------------------------------------------------------------

/** Lexer state inside a string at a character boundary (also: the state is a plain number, packed). */
export const TEXT = 0;
const UTF = 1; // inside a multi-byte character: aux = remaining | lo << 2 | hi << 10
const ESC = 2; // after a backslash
const HEX = 3; // in \uXXXX: aux = digits | value << 3
const LOW_BS = 4; // a high surrogate was escaped: its low half must follow as \uDC00–\uDFFF
const LOW_U = 5;
const LOW_HEX = 6;
export const LEX_FAIL = -1;
export const LEX_CLOSE = -2;

const pack = (mode: number, aux: number) => mode | (aux << 3);

function hexValue(b: number): number {
  if (b >= 0x30 && b <= 0x39) return b - 0x30;
  if (b >= 0x61 && b <= 0x66) return b - 0x57;
  if (b >= 0x41 && b <= 0x46) return b - 0x37;
  return -1;
}

/**
 * One byte of string text. Returns LEX_FAIL, LEX_CLOSE (the closing quote), or the next state × 2
 * plus 1 when this byte begins a character (lengths are counted as characters begin, so a limit
 * can refuse a character before its first byte). An escaped surrogate pair is one character, as
 * JSON Schema counts it; a lone surrogate is refused.
 *
 * canonical: only the spelling JSON.stringify would give (no \/, lower-case \u00xx for control
 * characters only), so two different spellings never name the same object key.
 */
export function lexString(st: number, b: number, canonical: boolean): number {
  const mode = st & 7;
  const aux = st >>> 3;
  switch (mode) {
    case TEXT:
      if (b === 0x22) return LEX_CLOSE;
      if (b === 0x5c) return (ESC << 1) | 1;
      if (b < 0x20) return LEX_FAIL;
      if (b < 0x80) return (TEXT << 1) | 1;
      if (b >= 0xc2 && b <= 0xdf) return (pack(UTF, 1 | (0x80 << 2) | (0xbf << 10)) << 1) | 1;
      if (b === 0xe0) return (pack(UTF, 2 | (0xa0 << 2) | (0xbf << 10)) << 1) | 1;
      if (b === 0xed) return (pack(UTF, 2 | (0x80 << 2) | (0x9f << 10)) << 1) | 1;
      if (b >= 0xe1 && b <= 0xef) return (pack(UTF, 2 | (0x80 << 2) | (0xbf << 10)) << 1) | 1;
      if (b === 0xf0) return (pack(UTF, 3 | (0x90 << 2) | (0xbf << 10)) << 1) | 1;
      if (b >= 0xf1 && b <= 0xf3) return (pack(UTF, 3 | (0x80 << 2) | (0xbf << 10)) << 1) | 1;
      if (b === 0xf4) return (pack(UTF, 3 | (0x80 << 2) | (0x8f << 10)) << 1) | 1;
      return LEX_FAIL;
    case UTF: {
      const rem = aux & 3;
      if (b < ((aux >>> 2) & 0xff) || b > ((aux >>> 10) & 0xff)) return LEX_FAIL;
      return (rem === 1 ? TEXT : pack(UTF, (rem - 1) | (0x80 << 2) | (0xbf << 10))) << 1;
    }
    case ESC:
      if (b === 0x22 || b === 0x5c || b === 0x62 || b === 0x66 || b === 0x6e || b === 0x72 || b === 0x74) return TEXT << 1;
      if (b === 0x2f && !canonical) return TEXT << 1;
      if (b === 0x75) return pack(HEX, 0) << 1;
      return LEX_FAIL;
    case HEX: {
      const digits = aux & 7;
      const h = hexValue(b);
      if (h < 0) return LEX_FAIL;
      const value = ((aux >>> 3) << 4) | h;
      if (canonical) {
        // JSON.stringify writes \u00xx (lower case) only for control characters without a short form
        if (b >= 0x41 && b <= 0x46) return LEX_FAIL;
        if (digits < 2 && h !== 0) return LEX_FAIL;
        if (digits === 2 && h > 1) return LEX_FAIL;
        if (digits === 3 && (value === 8 || value === 9 || value === 0xa || value === 0xc || value === 0xd)) return LEX_FAIL;
      } else if (digits === 1 && value >= 0xdc && value <= 0xdf) return LEX_FAIL;
      if (digits < 3) return pack(HEX, (digits + 1) | (value << 3)) << 1;
      return (value >= 0xd800 && value <= 0xdbff ? pack(LOW_BS, 0) : TEXT) << 1;
    }
    case LOW_BS:
      return b === 0x5c ? pack(LOW_U, 0) << 1 : LEX_FAIL;
    case LOW_U:
      return b === 0x75 ? pack(LOW_HEX, 0) << 1 : LEX_FAIL;
    case LOW_HEX: {
      const digits = aux;
      const h = hexValue(b);
      if (h < 0 || (digits === 0 && h !== 0xd) || (digits === 1 && h < 0xc)) return LEX_FAIL;
      return (digits < 3 ? pack(LOW_HEX, digits + 1) : TEXT) << 1;
    }
  }
  return LEX_FAIL;
}

/** A string value's length limits, in characters (code points). */
export interface StringSpec {
  readonly min: number;
  readonly max: number;
}

const OPEN = -1;

/** A JSON string value from its opening quote to its closing one. */
export class StringFrame extends Frame {
  constructor(
    readonly spec: StringSpec,
    readonly count: number,
    /** A lexer state, or OPEN before the opening quote. */
    readonly st: number,
  ) {
    super();
  }

  static start(spec: StringSpec): StringFrame {
    return new StringFrame(spec, 0, OPEN);
  }

  override byte(b: number, s: Stack, k: Sink): void {
    if (this.st === OPEN) {
      if (b === 0x22) k.enter(new Stack(new StringFrame(this.spec, 0, TEXT), s.next));
      return;
    }
    const r = lexString(this.st, b, false);
    if (r === LEX_FAIL) return;
    if (r === LEX_CLOSE) {
      if (this.count >= this.spec.min) k.pop(s);
      return;
    }
    const begins = r & 1;
    if (begins && this.count >= this.spec.max) return;
    k.enter(new Stack(new StringFrame(this.spec, this.count + begins, r >> 1), s.next));
  }

  override freeChars(): number {
    return this.st === TEXT ? this.spec.max - this.count : -1;
  }
}

// --- numbers -----------------------------------------------------------------------------------

/*
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? with at most 15 integer digits, 15 fraction digits
 * and 2 exponent digits: every number written parses to a finite double (JSON Schema validators
 * reject Infinity), an integer stays exact (below 2^53), and a model cannot spin on digits forever.
 * An integer is the same without fraction or exponent.
 */
const MAX_INT_DIGITS = 15;
const MAX_FRAC_DIGITS = 15;
const MAX_EXP_DIGITS = 2;
const N_START = 0;
const N_MINUS = 1;
const N_ZERO = 2;
const N_INT = 3;
const N_DOT = 4;
const N_FRAC = 5;
const N_EXP = 6;
const N_EXP_SIGN = 7;
const N_EXP_DIGITS = 8;
const ACCEPTS = [false, false, true, true, false, true, false, false, true];

export class NumberFrame extends Frame {
  private static readonly table = new Map<number, NumberFrame>();

  private constructor(
    readonly st: number,
    readonly digits: number,
    readonly integer: boolean,
  ) {
    super();
  }

  /** Frames are shared: there are only a few hundred states. */
  static of(st: number, digits: number, integer: boolean): NumberFrame {
    const key = (st * 32 + digits) * 2 + (integer ? 1 : 0);
    let f = NumberFrame.table.get(key);
    if (!f) NumberFrame.table.set(key, (f = new NumberFrame(st, digits, integer)));
    return f;
  }

  static start(integer: boolean): NumberFrame {
    return NumberFrame.of(N_START, 0, integer);
  }

  override byte(b: number, s: Stack, k: Sink): void {
    const next = this.next(b);
    if (next) k.enter(new Stack(next, s.next));
  }

  private next(b: number): NumberFrame | undefined {
    const digit = b >= 0x30 && b <= 0x39;
    const fractional = !this.integer;
    const of = (st: number, digits = 0) => NumberFrame.of(st, digits, this.integer);
    switch (this.st) {
      case N_START:
      case N_MINUS:
        if (b === 0x2d && this.st === N_START) return of(N_MINUS);
        if (b === 0x30) return of(N_ZERO);
        if (digit) return of(N_INT, 1);
        return undefined;
      case N_ZERO:
      case N_INT:
        if (digit && this.st === N_INT && this.digits < MAX_INT_DIGITS) return of(N_INT, this.digits + 1);
        if (fractional && b === 0x2e) return of(N_DOT);
        if (fractional && (b === 0x65 || b === 0x45)) return of(N_EXP);
        return undefined;
      case N_DOT:
        return digit ? of(N_FRAC, 1) : undefined;
      case N_FRAC:
        if (digit && this.digits < MAX_FRAC_DIGITS) return of(N_FRAC, this.digits + 1);
        if (b === 0x65 || b === 0x45) return of(N_EXP);
        return undefined;
      case N_EXP:
        if (b === 0x2b || b === 0x2d) return of(N_EXP_SIGN);
        return digit ? of(N_EXP_DIGITS, 1) : undefined;
      case N_EXP_SIGN:
        return digit ? of(N_EXP_DIGITS, 1) : undefined;
      case N_EXP_DIGITS:
        return digit && this.digits < MAX_EXP_DIGITS ? of(N_EXP_DIGITS, this.digits + 1) : undefined;
    }
    return undefined;
  }

  override eps(s: Stack, k: Sink): void {
    if (ACCEPTS[this.st]) k.pop(s);
  }
}

// --- whitespace and punctuation ----------------------------------------------------------------

/*
 * Insignificant whitespace between two JSON tokens is bounded, so a model cannot spend its tokens
 * on it (a small model offered 32 blanks per gap wrote a 32-space token in every one): a gap is
 * nothing, one space, or one line break (\n or \r\n) followed by at most 20 spaces or tabs of
 * indentation — enough for JSON.stringify(v, null, 2) ten levels deep. None is allowed before or
 * after the top-level value.
 */
const MAX_INDENT = 20;
const G_START = -1;
const G_CR = -2;

export class GapFrame extends Frame {
  private static readonly table = new Map<number, GapFrame>();

  /** at: G_START, G_CR (a \r that needs its \n), or the indentation written after the line break. */
  private constructor(readonly at: number) {
    super();
  }

  static of(at: number): GapFrame {
    let f = GapFrame.table.get(at);
    if (!f) GapFrame.table.set(at, (f = new GapFrame(at)));
    return f;
  }

  override byte(b: number, s: Stack, k: Sink): void {
    const at = this.at;
    if (at === G_START) {
      if (b === 0x20) k.pop(s);
      else if (b === 0x0a) k.enter(new Stack(GapFrame.of(0), s.next));
      else if (b === 0x0d) k.enter(new Stack(GapFrame.of(G_CR), s.next));
    } else if (at === G_CR) {
      if (b === 0x0a) k.enter(new Stack(GapFrame.of(0), s.next));
    } else if ((b === 0x20 || b === 0x09) && at < MAX_INDENT) k.enter(new Stack(GapFrame.of(at + 1), s.next));
  }

  override eps(s: Stack, k: Sink): void {
    if (this.at !== G_CR) k.pop(s);
  }
}

export const GAP = GapFrame.of(G_START);

/** One byte of JSON punctuation (not a grammar literal: special tokens never match it). */
export class PunctFrame extends Frame {
  constructor(readonly ch: number) {
    super();
  }

  override byte(b: number, s: Stack, k: Sink): void {
    if (b === this.ch) k.pop(s);
  }
}

export const COMMA = new PunctFrame(0x2c);
export const COLON = new PunctFrame(0x3a);
export const CLOSE_BRACE = new PunctFrame(0x7d);
export const CLOSE_BRACKET = new PunctFrame(0x5d);
