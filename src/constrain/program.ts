import { WasteError } from '../util/errors.js';
import type { Grammar, LitTokens } from './grammar.js';
import { Value } from './json-matcher.js';
import { Expander, Frame, LitFrame, type Sink, Stack } from './machine.js';
import { type SchemaNode, compileSchema } from './schema-compile.js';

/** A grammar piece compiled: how to begin matching it on top of what follows it. */
export abstract class Piece {
  /** Expands into the piece when it is reached on a stack. */
  readonly frame: Frame = new PieceFrame(this);
  abstract enter(rest: Stack | null, k: Sink): void;
  /** Some text matches it. */
  abstract readonly sat: boolean;
  /** The empty text matches it. */
  abstract readonly nullable: boolean;
}

class PieceFrame extends Expander {
  constructor(readonly piece: Piece) {
    super();
  }
  override eps(s: Stack, k: Sink): void {
    this.piece.enter(s.next, k);
  }
}

const utf8 = new TextEncoder();

class Lit extends Piece {
  readonly sat = true;
  readonly nullable: boolean;
  readonly bytes: Uint8Array;
  constructor(
    text: string,
    private readonly tokens?: LitTokens,
  ) {
    super();
    this.bytes = utf8.encode(text);
    this.nullable = this.bytes.length === 0;
  }
  enter(rest: Stack | null, k: Sink): void {
    k.enter(this.bytes.length ? new Stack(new LitFrame(this.bytes, 0, this.tokens !== 'plain', this.tokens === 'special'), rest) : rest);
  }
}

class Json extends Piece {
  readonly nullable = false;
  readonly sat: boolean;
  private readonly value: Value;
  constructor(node: SchemaNode) {
    super();
    this.sat = node.sat;
    this.value = Value.of(node);
  }
  enter(rest: Stack | null, k: Sink): void {
    this.value.enter(rest, k);
  }
}

class Seq extends Piece {
  readonly sat: boolean;
  readonly nullable: boolean;
  constructor(readonly items: Piece[]) {
    super();
    this.sat = items.every((p) => p.sat);
    this.nullable = items.every((p) => p.nullable);
  }
  enter(rest: Stack | null, k: Sink): void {
    if (this.items.length === 0) return k.enter(rest);
    let r = rest;
    for (let i = this.items.length - 1; i > 0; i--) r = new Stack(this.items[i].frame, r);
    this.items[0].enter(r, k);
  }
}

class Alt extends Piece {
  readonly sat: boolean;
  readonly nullable: boolean;
  readonly items: Piece[];
  constructor(items: Piece[]) {
    super();
    // a branch nothing can match is never offered, so no prefix leads nowhere
    this.items = items.filter((p) => p.sat);
    this.sat = this.items.length > 0;
    this.nullable = this.items.some((p) => p.nullable);
  }
  enter(rest: Stack | null, k: Sink): void {
    for (const p of this.items) p.enter(rest, k);
  }
}

class Repeat extends Piece {
  readonly sat: boolean;
  readonly nullable: boolean;
  readonly max: number;
  readonly sep: Lit | undefined;
  constructor(
    readonly item: Piece,
    readonly min: number,
    max: number,
    sep: string | undefined,
  ) {
    super();
    this.max = item.sat ? max : 0;
    this.sat = min <= this.max;
    this.nullable = min === 0 || item.nullable;
    this.sep = sep ? new Lit(sep) : undefined;
  }
  enter(rest: Stack | null, k: Sink): void {
    k.enter(new Stack(new RepeatFrame(this, 0), rest));
  }
}

class RepeatFrame extends Expander {
  constructor(
    readonly piece: Repeat,
    readonly count: number,
  ) {
    super();
  }
  override eps(s: Stack, k: Sink): void {
    const { piece, count } = this;
    if (count >= piece.min) k.pop(s);
    if (count >= piece.max) return;
    const more = new Stack(new RepeatFrame(piece, count + 1), s.next);
    if (count > 0 && piece.sep) piece.sep.enter(new Stack(piece.item.frame, more), k);
    else piece.item.enter(more, k);
  }
}

export interface GrammarOptions {
  /**
   * Schemas compiled beforehand (compileSchemaSteps, with a request's bounds and in slices), by
   * the schema object a json piece names; any other schema is compiled here.
   */
  schemas?: ReadonlyMap<unknown, SchemaNode>;
}

/** The grammar compiled; E_ARG when it is malformed or nothing can match it. */
export function compileGrammar(g: Grammar, opts: GrammarOptions = {}): Piece {
  // a schema named in several places (a tool in each of the parallel calls) is compiled once
  const json = new Map<unknown, Json>();
  const jsonPiece = (schema: unknown) => {
    let p = json.get(schema);
    if (!p) json.set(schema, (p = new Json(opts.schemas?.get(schema) ?? compileSchema(schema))));
    return p;
  };
  const top = compile(g, 'grammar', jsonPiece);
  if (!top.sat) throw new WasteError('E_ARG', 'the grammar (or its JSON Schema) admits no finite text: every reply would be cut off');
  return top;
}

function compile(g: Grammar, at: string, json: (schema: unknown) => Piece): Piece {
  switch (g?.kind) {
    case 'lit':
      if (typeof g.text !== 'string') throw new WasteError('E_ARG', `${at}: lit needs a text`);
      if (g.tokens !== undefined && g.tokens !== 'special' && g.tokens !== 'plain') throw new WasteError('E_ARG', `${at}: lit tokens must be "special" or "plain"`);
      return new Lit(g.text, g.tokens);
    case 'json':
      return json(g.schema);
    case 'seq':
      return new Seq(g.items.map((x, i) => compile(x, `${at}.items[${i}]`, json)));
    case 'alt':
      return new Alt(g.items.map((x, i) => compile(x, `${at}.items[${i}]`, json)));
    case 'repeat': {
      const { min, max, sep } = g;
      if (!Number.isSafeInteger(min) || min < 0 || !(max === Infinity || (Number.isSafeInteger(max) && max >= min)))
        throw new WasteError('E_ARG', `${at}: repeat needs 0 <= min <= max (got ${min}..${max})`);
      const item = compile(g.item, `${at}.item`, json);
      // copies of an item that can match nothing would pile up without reading a byte
      if (item.nullable && !sep) throw new WasteError('E_ARG', `${at}: repeating an item that may be empty needs a non-empty sep`);
      return new Repeat(item, min, max, sep);
    }
    default:
      throw new WasteError('E_ARG', `${at}: unknown grammar piece ${JSON.stringify((g as { kind?: unknown })?.kind)}`);
  }
}
