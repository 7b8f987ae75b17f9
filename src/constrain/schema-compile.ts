import { WasteError } from '../util/errors.js';
import { CompileMeter, type Steps, runNow } from './compile-meter.js';
import { checkSchemaSteps, isPlainObject, resolveRef } from './schema.js';

/*
 * A checked schema compiled to a graph the matcher can follow. Combinators are multiplied out:
 * every node is a conjunction of schema objects (named by the set of their ids, so a recursive
 * $ref leads back to the same node), written as alternatives (anyOf/oneOf/nullable branches), each
 * a flat set of keywords. A conjunction of two schemas is exact: per key, a property's value must
 * satisfy what each of them says of that key (its properties entry, else its additionalProperties).
 */

export const T_NULL = 1;
export const T_BOOLEAN = 2;
export const T_INTEGER = 4;
/** A number that need not be an integer (a fraction or an exponent may be written). */
export const T_FRACTIONAL = 8;
/** "number" is both bits: an integer is a number. */
export const T_NUMBER = T_FRACTIONAL | T_INTEGER;
export const T_STRING = 16;
export const T_ARRAY = 32;
export const T_OBJECT = 64;
export const T_ANY = 127;
const TYPE_BITS: Record<string, number> = { null: T_NULL, boolean: T_BOOLEAN, integer: T_INTEGER, number: T_NUMBER, string: T_STRING, array: T_ARRAY, object: T_OBJECT };

export interface SchemaNode {
  readonly id: number;
  readonly alts: Alternative[];
  /** Some finite JSON value satisfies it (after analysis). */
  sat: boolean;
}

/** One alternative: keywords that all hold. */
export interface Alternative {
  types: number;
  /** From enum/const: only these values. */
  values?: unknown[];
  minLength: number;
  maxLength: number;
  minItems: number;
  maxItems: number;
  prefix: SchemaNode[];
  items: SchemaNode;
  /** Every key named by properties or required, with what its value must satisfy. */
  props: Map<string, SchemaNode>;
  required: string[];
  additional: SchemaNode;
  // after analysis:
  sat: boolean;
  /** The types some value can be written in (0 when values restrict it). */
  satTypes: number;
  /** The values, as JSON.stringify writes them, that satisfy every other keyword too. */
  texts?: string[];
}

/** A schema object as written, its subschemas parsed alike. */
interface Base {
  id: number;
  bool?: boolean;
  /** Holds any keyword of its own (else it only combines others). */
  own: boolean;
  types?: number;
  values?: unknown[];
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  prefixItems?: Base[];
  items?: Base;
  properties?: Map<string, Base>;
  required?: string[];
  additional?: Base;
  allOf: Base[];
  /** Each a choice of one of the bases. */
  anyOf: Base[][];
}

const MAX_NODES = 10_000;
const MAX_ALTERNATIVES = 1_000;

/** The schema as a node graph; E_ARG when it is outside the supported subset (see schema.ts). */
export function compileSchema(schema: unknown): SchemaNode {
  return runNow(compileSchemaSteps(schema, new CompileMeter()));
}

/**
 * compileSchema as steps that give way every slice of the meter's work (see runSliced), its size
 * and the states it makes counted on the meter: a compile past one of the meter's limits stops
 * where it passes it (CompileBoundError).
 */
export function* compileSchemaSteps(schema: unknown, meter: CompileMeter): Steps<SchemaNode> {
  yield* checkSchemaSteps(schema, meter);
  return yield* new Compiler(schema, meter).run();
}

class Compiler {
  private nextId = 0;
  private readonly parsed = new Map<object, Base>();
  private readonly TRUE: Base = { id: this.nextId++, bool: true, own: false, allOf: [], anyOf: [] };
  private readonly FALSE: Base = { id: this.nextId++, bool: false, own: false, allOf: [], anyOf: [] };
  private readonly NULL: Base = { id: this.nextId++, own: true, types: T_NULL, allOf: [], anyOf: [] };
  private readonly nodes = new Map<string, SchemaNode>();
  private readonly queue: { node: SchemaNode; bases: Base[] }[] = [];

  constructor(
    private readonly root: unknown,
    private readonly meter: CompileMeter,
  ) {}

  *run(): Steps<SchemaNode> {
    const top = this.node([yield* this.parse(this.root)]);
    for (let i = 0; i < this.queue.length; i++) {
      const { node, bases } = this.queue[i];
      for (const term of yield* this.expand(bases)) node.alts.push(yield* this.merge(term));
    }
    yield* analyse([...this.nodes.values()], this.meter);
    return top;
  }

  // checkSchema has walked the schema already: every reference resolves, every keyword is known
  private *parse(s: unknown): Steps<Base> {
    if (s === true) return this.TRUE;
    if (s === false) return this.FALSE;
    const o = s as Record<string, unknown>;
    const known = this.parsed.get(o);
    if (known) return known;
    this.meter.state();
    if (this.meter.due) yield;
    const b: Base = { id: this.nextId++, own: false, allOf: [], anyOf: [] };
    // nullable wraps the schema in a choice, and a $ref back to this object must see the wrapper
    const self: Base = o.nullable === true ? { id: this.nextId++, own: false, allOf: [], anyOf: [[this.NULL, b]] } : b;
    this.parsed.set(o, self);
    if (o.type !== undefined) {
      b.types = (Array.isArray(o.type) ? o.type : [o.type]).reduce((m: number, t) => m | TYPE_BITS[t as string], 0);
      b.own = true;
    }
    if (Array.isArray(o.enum)) b.values = o.enum;
    if (Object.hasOwn(o, 'const')) {
      b.values = (b.values ?? [o.const]).filter((v) => jsonEqual(v, o.const));
      this.meter.tick(b.values.length);
    }
    if (b.values) b.own = true;
    for (const k of ['minLength', 'maxLength', 'minItems', 'maxItems'] as const) {
      if (typeof o[k] === 'number') {
        b[k] = o[k];
        b.own = true;
      }
    }
    if (isPlainObject(o.properties)) {
      b.properties = new Map();
      for (const [k, v] of Object.entries(o.properties)) b.properties.set(k, yield* this.parse(v));
      b.own = true;
    }
    if (Array.isArray(o.required)) {
      b.required = o.required as string[];
      b.own = true;
    }
    if (o.additionalProperties !== undefined) {
      b.additional = yield* this.parse(o.additionalProperties);
      b.own = true;
    }
    if (o.items !== undefined) {
      b.items = yield* this.parse(o.items);
      b.own = true;
    }
    if (Array.isArray(o.prefixItems)) {
      b.prefixItems = [];
      for (const v of o.prefixItems) b.prefixItems.push(yield* this.parse(v));
      b.own = true;
    }
    // one at a time: push(...list) would pass a schema's whole allOf as arguments, on the stack
    if (Array.isArray(o.allOf)) for (const v of o.allOf) b.allOf.push(yield* this.parse(v));
    if (typeof o.$ref === 'string') b.allOf.push(yield* this.parse(resolveRef(this.root, o.$ref, o.$ref)));
    for (const k of ['anyOf', 'oneOf'] as const) {
      const list = o[k];
      if (Array.isArray(list)) {
        const choice: Base[] = [];
        for (const v of list) choice.push(yield* this.parse(v));
        b.anyOf.push(choice);
      }
    }
    return self;
  }

  /** The node for the conjunction of these schemas (shared by every path that reaches the same set). */
  private node(bases: Base[]): SchemaNode {
    this.meter.tick(bases.length);
    const ids = [...new Set(bases.filter((b) => b !== this.TRUE).map((b) => b.id))].sort((a, b) => a - b);
    const key = ids.includes(this.FALSE.id) ? 'false' : ids.join(',');
    let n = this.nodes.get(key);
    if (!n) {
      if (this.nodes.size >= MAX_NODES) throw new WasteError('E_ARG', `JSON Schema too complex to enforce while sampling (over ${MAX_NODES} combinations of subschemas)`);
      this.meter.state();
      n = { id: this.nodes.size, alts: [], sat: false };
      this.nodes.set(key, n);
      this.queue.push({ node: n, bases: key === 'false' ? [this.FALSE] : bases });
    }
    return n;
  }

  /**
   * The conjunction multiplied out: each result is a set of schemas whose own keywords must all
   * hold, in the order of a depth-first walk that takes a schema's allOf, then its anyOf choices,
   * then what follows it. The walk keeps its own stack of choices left to try and a schema's parts
   * are taken one at a time: recursing once per part overflowed the call stack on a long allOf, and
   * copying what is left at every step made it quadratic.
   */
  private *expand(bases: Base[]): Steps<Base[][]> {
    const out: Base[][] = [];
    const tooMany = () => new WasteError('E_ARG', `JSON Schema too complex to enforce while sampling (over ${MAX_ALTERNATIVES} alternatives in one place)`);
    // `pending` is what is left to take, the next last; a branch is a choice's options still to try
    type Walk = { pending: (Base | Base[])[]; term: Base[]; seen: Set<number> };
    const branches: { walk: Walk; options: Base[]; next: number }[] = [];
    let walk: Walk | undefined = { pending: [...bases].reverse(), term: [], seen: new Set() };
    for (;;) {
      if (this.meter.due) yield;
      this.meter.tick();
      if (!walk) {
        const b = branches[branches.length - 1];
        if (!b) return out;
        const option = b.options[b.next++];
        if (b.next === b.options.length) branches.pop();
        this.meter.tick(b.walk.pending.length + b.walk.term.length + b.walk.seen.size);
        walk = { pending: [...b.walk.pending, option], term: [...b.walk.term], seen: new Set(b.walk.seen) };
      }
      if (out.length > MAX_ALTERNATIVES) throw tooMany();
      const first = walk.pending.pop();
      if (first === undefined) {
        out.push(walk.term);
        walk = undefined;
      } else if (Array.isArray(first)) {
        if (first.length) branches.push({ walk, options: first, next: 0 });
        walk = undefined;
      } else if (first.bool === false && !walk.seen.has(first.id)) {
        walk = undefined;
      } else if (!walk.seen.has(first.id) && first.bool !== true) {
        walk.seen.add(first.id);
        if (first.own) walk.term.push(first);
        for (let i = first.anyOf.length - 1; i >= 0; i--) walk.pending.push(first.anyOf[i]);
        for (let i = first.allOf.length - 1; i >= 0; i--) walk.pending.push(first.allOf[i]);
      }
    }
  }

  private *merge(term: Base[]): Steps<Alternative> {
    this.meter.state();
    // loops, not Math.max(...list): a conjunction can hold more schemas than a call takes arguments
    const max = (k: 'minLength' | 'minItems') => term.reduce((m, b) => Math.max(m, b[k] ?? 0), 0);
    const min = (k: 'maxLength' | 'maxItems') => term.reduce((m, b) => Math.min(m, b[k] ?? Infinity), Infinity);
    let values: unknown[] | undefined;
    for (const b of term) {
      if (!b.values) continue;
      if (!values) values = b.values;
      else {
        // by canonical text: comparing every value with every other was quadratic
        this.meter.tick(b.values.length + values.length);
        const keys = new Set(b.values.map(canonical));
        values = values.filter((v) => keys.has(canonical(v)));
        if (this.meter.due) yield;
      }
    }
    const types = term.reduce((m, b) => m & (b.types ?? T_ANY), T_ANY);
    const alt: Alternative = {
      types,
      values,
      minLength: max('minLength'),
      maxLength: min('maxLength'),
      minItems: max('minItems'),
      maxItems: min('maxItems'),
      prefix: [],
      items: this.node([]),
      props: new Map(),
      required: [],
      additional: this.node([]),
      sat: false,
      satTypes: 0,
    };
    // subschemas of types this alternative cannot take are not compiled at all
    if (types & T_ARRAY) {
      const prefixLength = term.reduce((m, b) => Math.max(m, b.prefixItems?.length ?? 0), 0);
      for (let i = 0; i < prefixLength; i++) {
        this.meter.state();
        alt.prefix.push(this.node(term.map((b) => (b.prefixItems && i < b.prefixItems.length ? b.prefixItems[i] : (b.items ?? this.TRUE)))));
        if (this.meter.due) yield;
      }
      alt.items = this.node(term.map((b) => b.items ?? this.TRUE));
    }
    if (types & T_OBJECT) {
      const keys = new Set<string>();
      for (const b of term) {
        for (const k of b.properties?.keys() ?? []) keys.add(k);
        for (const k of b.required ?? []) keys.add(k);
      }
      for (const k of keys) {
        // the matcher keeps each name's spelling in a trie of this alternative's keys
        this.meter.state(1 + k.length);
        alt.props.set(k, this.node(term.map((b) => b.properties?.get(k) ?? b.additional ?? this.TRUE)));
        if (this.meter.due) yield;
      }
      alt.required = [...new Set(term.flatMap((b) => b.required ?? []))];
      alt.additional = this.node(term.map((b) => b.additional ?? this.TRUE));
    }
    return alt;
  }
}

/**
 * Which nodes some finite value satisfies: the least fixed point (a node is satisfiable once one of
 * its alternatives is, given what is known so far), so a schema that can only recurse forever is
 * not. The matcher offers only satisfiable choices, so a reply can always be finished. Worked from
 * a list of nodes newly found satisfiable, each waking only the alternatives that need it: going
 * over every alternative until nothing changed took as many rounds as the longest chain of nodes.
 */
function* analyse(nodes: SchemaNode[], meter: CompileMeter): Steps<void> {
  for (const n of nodes) {
    for (const a of n.alts) {
      if (!a.values) continue;
      // the texts the matcher will keep in a trie, byte by byte
      const texts = new Set<string>();
      for (const v of a.values) {
        meter.tick();
        if (acceptsOwn(a, v)) {
          const t = JSON.stringify(v);
          if (!texts.has(t)) {
            texts.add(t);
            meter.state(t.length);
          }
        }
        if (meter.due) yield;
      }
      a.texts = [...texts];
    }
  }
  const found: SchemaNode[] = [];
  const visit = (n: SchemaNode, a: Alternative) => {
    meter.tick();
    if (a.sat) return;
    a.satTypes = a.texts ? 0 : satTypes(a);
    a.sat = a.texts ? a.texts.length > 0 : a.satTypes !== 0;
    if (a.sat && !n.sat) {
      n.sat = true;
      found.push(n);
    }
  };
  // the alternatives waiting on each node: those whose satisfiability looks at it
  const waiting = new Map<SchemaNode, { n: SchemaNode; a: Alternative }[]>();
  for (const n of nodes) {
    for (const a of n.alts) {
      for (const d of needs(a)) {
        let list = waiting.get(d);
        if (!list) waiting.set(d, (list = []));
        list.push({ n, a });
      }
      visit(n, a);
      if (meter.due) yield;
    }
  }
  for (let d = found.pop(); d; d = found.pop()) {
    for (const { n, a } of waiting.get(d) ?? []) {
      visit(n, a);
      if (meter.due) yield;
    }
  }
  for (const n of nodes) for (const a of n.alts) a.satTypes = a.texts ? 0 : satTypes(a);
}

/** The nodes whose satisfiability satTypes(a) looks at. */
function needs(a: Alternative): SchemaNode[] {
  if (a.texts) return [];
  const out: SchemaNode[] = [];
  if (a.types & T_ARRAY && a.minItems <= a.maxItems) {
    for (let i = 0; i < Math.min(a.minItems, a.prefix.length); i++) out.push(a.prefix[i]);
    if (a.minItems > a.prefix.length) out.push(a.items);
  }
  if (a.types & T_OBJECT) for (const k of a.required) out.push(a.props.get(k)!);
  return out;
}

function satTypes(a: Alternative): number {
  let t = a.types & (T_NULL | T_BOOLEAN | T_NUMBER);
  if (a.types & T_STRING && a.minLength <= a.maxLength) t |= T_STRING;
  if (a.types & T_ARRAY && a.minItems <= a.maxItems) {
    // every item past the prefix is `items`: look at it once, however large minItems is
    let ok = true;
    for (let i = 0; i < Math.min(a.minItems, a.prefix.length) && ok; i++) ok = a.prefix[i].sat;
    if (ok && a.minItems > a.prefix.length) ok = a.items.sat;
    if (ok) t |= T_ARRAY;
  }
  if (a.types & T_OBJECT && a.required.every((k) => a.props.get(k)!.sat)) t |= T_OBJECT;
  return t;
}

export function itemAt(a: Alternative, i: number): SchemaNode {
  return i < a.prefix.length ? a.prefix[i] : a.items;
}

/** Whether a JSON value satisfies the node (used to keep only the enum values a schema allows). */
export function accepts(n: SchemaNode, v: unknown): boolean {
  let key: string | undefined;
  return n.alts.some((a) => {
    if (a.values) {
      // looked up by canonical text: an enum of arrays whose items are enums compared every pair
      let keys = valueKeys.get(a);
      if (!keys) valueKeys.set(a, (keys = new Set(a.values.map(canonical))));
      if (!keys.has((key ??= canonical(v)))) return false;
    }
    return acceptsOwn(a, v);
  });
}

const valueKeys = new WeakMap<Alternative, Set<string>>();

/** A JSON value's text with every object's keys in order: two values are jsonEqual exactly when their texts are equal. */
function canonical(v: unknown): string {
  if (v === null || typeof v !== 'object') return String(JSON.stringify(v));
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  const o = v as Record<string, unknown>;
  return `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${canonical(o[k])}`)
    .join(',')}}`;
}

function acceptsOwn(a: Alternative, v: unknown): boolean {
  if (v === null) return (a.types & T_NULL) !== 0;
  if (typeof v === 'boolean') return (a.types & T_BOOLEAN) !== 0;
  if (typeof v === 'number') return Number.isFinite(v) && (a.types & (Number.isInteger(v) ? T_INTEGER : T_FRACTIONAL)) !== 0;
  if (typeof v === 'string') {
    const n = [...v].length;
    return (a.types & T_STRING) !== 0 && n >= a.minLength && n <= a.maxLength;
  }
  if (Array.isArray(v)) return (a.types & T_ARRAY) !== 0 && v.length >= a.minItems && v.length <= a.maxItems && v.every((x, i) => accepts(itemAt(a, i), x));
  if (isPlainObject(v)) {
    if (!(a.types & T_OBJECT) || !a.required.every((k) => Object.hasOwn(v, k))) return false;
    return Object.entries(v).every(([k, x]) => accepts(a.props.get(k) ?? a.additional, x));
  }
  return false;
}

/** Equality of JSON values (key order ignored), as enum and const compare them. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) return a.length === (b as unknown[]).length && a.every((x, i) => jsonEqual(x, (b as unknown[])[i]));
  const ka = Object.keys(a);
  const bo = b as Record<string, unknown>;
  return ka.length === Object.keys(bo).length && ka.every((k) => Object.hasOwn(bo, k) && jsonEqual((a as Record<string, unknown>)[k], bo[k]));
}
