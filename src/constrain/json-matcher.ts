import { EMPTY, Members, ObjectShape } from './json-object.js';
import { CLOSE_BRACKET, COMMA, GAP, NumberFrame, StringFrame } from './json-text.js';
import { Expander, Frame, LitFrame, type Sink, Stack } from './machine.js';
import { type Alternative, itemAt, type SchemaNode, T_ARRAY, T_BOOLEAN, T_FRACTIONAL, T_INTEGER, T_NULL, T_OBJECT, T_STRING } from './schema-compile.js';

/*
 * JSON values against a compiled schema, as frames: a value begins as one configuration per
 * alternative and type it may take, and arrays and objects (json-object.ts) expand into their
 * members. Only satisfiable choices are ever offered (see analyse in schema-compile.ts), so
 * whatever prefix the matcher accepts can still be finished.
 */

const utf8 = new TextEncoder();
const bytesOf = (s: string) => utf8.encode(s);

const prepared = new WeakMap<SchemaNode, Value>();

/** A schema node ready to match: the frames a value of it may begin with. */
export class Value {
  private starts?: Frame[];
  /** Expands into those frames. */
  readonly frame: Frame;

  private constructor(readonly node: SchemaNode) {
    this.frame = new ValueFrame(this);
  }

  static of(node: SchemaNode): Value {
    let v = prepared.get(node);
    if (!v) prepared.set(node, (v = new Value(node)));
    return v;
  }

  enter(rest: Stack | null, k: Sink): void {
    this.starts ??= startsOf(this.node);
    for (const f of this.starts) k.enter(new Stack(f, rest));
  }
}

class ValueFrame extends Expander {
  constructor(readonly value: Value) {
    super();
  }
  override eps(s: Stack, k: Sink): void {
    this.value.enter(s.next, k);
  }
}

const NULL = bytesOf('null');
const TRUE = bytesOf('true');
const FALSE = bytesOf('false');

function startsOf(node: SchemaNode): Frame[] {
  const out: Frame[] = [];
  for (const a of node.alts) {
    if (!a.sat) continue;
    if (a.texts) {
      out.push(new EnumFrame(enumTrie(a.texts)));
      continue;
    }
    const t = a.satTypes;
    if (t & T_NULL) out.push(new LitFrame(NULL, 0, false));
    if (t & T_BOOLEAN) out.push(new LitFrame(TRUE, 0, false), new LitFrame(FALSE, 0, false));
    if (t & T_FRACTIONAL) out.push(NumberFrame.start(false));
    else if (t & T_INTEGER) out.push(NumberFrame.start(true));
    if (t & T_STRING) out.push(StringFrame.start({ min: a.minLength, max: a.maxLength }));
    if (t & T_ARRAY) out.push(new OpenFrame(0x5b, new ArrayItems(new ArrayShape(a), 0)));
    if (t & T_OBJECT) out.push(new OpenFrame(0x7b, new Members(new ObjectShape(a), EMPTY, true)));
  }
  return out;
}

// --- enum / const: the allowed values' texts, as a trie ----------------------------------------

class TrieNode {
  readonly children = new Map<number, TrieNode>();
  end = false;
}

function enumTrie(texts: string[]): TrieNode {
  const root = new TrieNode();
  for (const t of texts) {
    let n = root;
    for (const b of bytesOf(t)) {
      let c = n.children.get(b);
      if (!c) n.children.set(b, (c = new TrieNode()));
      n = c;
    }
    n.end = true;
  }
  return root;
}

class EnumFrame extends Frame {
  constructor(readonly at: TrieNode) {
    super();
    this.consumes = at.children.size > 0;
  }
  override byte(b: number, s: Stack, k: Sink): void {
    const c = this.at.children.get(b);
    if (c) k.enter(new Stack(new EnumFrame(c), s.next));
  }
  override eps(s: Stack, k: Sink): void {
    if (this.at.end) k.pop(s);
  }
}

/** The opening bracket or brace of a container, then a gap, then its members. */
class OpenFrame extends Frame {
  constructor(
    readonly ch: number,
    readonly then: Frame,
  ) {
    super();
  }
  override byte(b: number, s: Stack, k: Sink): void {
    if (b === this.ch) k.enter(new Stack(GAP, new Stack(this.then, s.next)));
  }
}

// --- arrays: [ gap (] | value gap (, gap value gap)* ]) -------------------------------------------

class ArrayShape {
  private readonly values: (Value | null)[] = [];
  readonly min: number;
  readonly max: number;
  constructor(readonly alt: Alternative) {
    this.min = alt.minItems;
    this.max = alt.maxItems;
  }
  /** What item i must be, or null when no value can be. */
  at(i: number): Value | null {
    const j = Math.min(i, this.alt.prefix.length);
    if (this.values[j] === undefined) {
      const node = itemAt(this.alt, j);
      this.values[j] = node.sat ? Value.of(node) : null;
    }
    return this.values[j];
  }
}

class ArrayItems extends Expander {
  constructor(
    readonly shape: ArrayShape,
    readonly count: number,
  ) {
    super();
  }
  override eps(s: Stack, k: Sink): void {
    const { shape, count } = this;
    if (count >= shape.min) k.enter(new Stack(CLOSE_BRACKET, s.next));
    const item = count < shape.max ? shape.at(count) : null;
    if (!item) return;
    let body = new Stack(item.frame, new Stack(GAP, new Stack(new ArrayItems(shape, count + 1), s.next)));
    if (count > 0) body = new Stack(COMMA, new Stack(GAP, body));
    k.enter(body);
  }
}
