import { CLOSE_BRACE, COLON, COMMA, GAP, LEX_CLOSE, LEX_FAIL, lexString, TEXT } from './json-text.js';
import { Value } from './json-matcher.js';
import { Expander, Frame, type Sink, Stack } from './machine.js';
import type { Alternative } from './schema-compile.js';

/*
 * Objects: { gap (} | key gap : gap value gap (, gap key gap : gap value gap)* }).
 * Keys are matched in the spelling JSON.stringify gives them (raw UTF-8, escapes only where
 * needed): a key then has one spelling, so a repeated key is caught by comparing bytes, and a
 * name from properties is told from an additional key the same way.
 */

const latin1 = (s: string) => Buffer.from(new TextEncoder().encode(s)).toString('latin1');

class KeyTrie {
  readonly children = new Map<number, KeyTrie>();
  /** The property whose spelling ends here, or -1. */
  key = -1;
  /** The properties whose spellings pass through here. */
  readonly below: number[] = [];
}

export class ObjectShape {
  /** Spellings (JSON.stringify, quotes included, as byte strings) of the properties a value can be given for. */
  readonly spellings: string[] = [];
  readonly bySpelling = new Map<string, number>();
  /** Spellings of every property named, including those no value can be given for: never additional keys. */
  readonly named = new Set<string>();
  private readonly values: Value[] = [];
  readonly required: string[];
  readonly additional: Value | null;
  readonly trie = new KeyTrie();

  constructor(alt: Alternative) {
    for (const [name, node] of alt.props) {
      const spelling = latin1(JSON.stringify(name));
      this.named.add(spelling);
      if (!node.sat) continue;
      const i = this.spellings.length;
      this.spellings.push(spelling);
      this.bySpelling.set(spelling, i);
      this.values.push(Value.of(node));
      let t = this.trie;
      t.below.push(i);
      for (let j = 0; j < spelling.length; j++) {
        const b = spelling.charCodeAt(j);
        let c = t.children.get(b);
        if (!c) t.children.set(b, (c = new KeyTrie()));
        t = c;
        t.below.push(i);
      }
      t.key = i;
    }
    this.required = alt.required.map((name) => latin1(JSON.stringify(name)));
    this.additional = alt.additional.sat ? Value.of(alt.additional) : null;
  }

  valueOf(spelling: string): Value {
    const i = this.bySpelling.get(spelling);
    return i === undefined ? this.additional! : this.values[i];
  }

  /** Some key may still be written (an unused property, or any other key). */
  canAdd(used: ReadonlySet<string>): boolean {
    return this.additional !== null || this.spellings.some((sp) => !used.has(sp));
  }

  open(t: KeyTrie, used: ReadonlySet<string>): boolean {
    for (const i of t.below) if (!used.has(this.spellings[i])) return true;
    return false;
  }
}

export const EMPTY: ReadonlySet<string> = new Set();

/** Between members: the closing brace (once every required key is there), or another key. */
export class Members extends Expander {
  constructor(
    readonly shape: ObjectShape,
    /** Spellings of the keys written so far. */
    readonly used: ReadonlySet<string>,
    readonly first: boolean,
  ) {
    super();
  }
  override eps(s: Stack, k: Sink): void {
    const { shape, used } = this;
    if (shape.required.every((sp) => used.has(sp))) k.enter(new Stack(CLOSE_BRACE, s.next));
    if (!shape.canAdd(used)) return;
    const key = new Stack(new KeyFrame(shape, used, shape.trie, shape.additional ? BEFORE_QUOTE : DEAD, ''), new Stack(new AfterKey(shape, used), s.next));
    k.enter(this.first ? key : new Stack(COMMA, new Stack(GAP, key)));
  }
}

const DEAD = -1;
const BEFORE_QUOTE = -3;

/**
 * A key: followed along the trie of property spellings while it is a prefix of an unused one, and
 * (when additional keys are allowed) lexed as canonical string text, its bytes kept so a repeat can
 * be refused at the closing quote.
 */
class KeyFrame extends Frame {
  constructor(
    readonly shape: ObjectShape,
    readonly used: ReadonlySet<string>,
    readonly at: KeyTrie | null,
    /** Lexer state of an additional key, DEAD when none may be written here. */
    readonly st: number,
    readonly text: string,
  ) {
    super();
  }

  override byte(b: number, s: Stack, k: Sink): void {
    let at = this.at?.children.get(b) ?? null;
    if (at && !this.shape.open(at, this.used)) at = null;
    if (at && at.key >= 0) {
      k.pop(s, this.shape.spellings[at.key]);
      return;
    }
    let st = DEAD;
    if (this.st === BEFORE_QUOTE) st = b === 0x22 ? TEXT : DEAD;
    else if (this.st !== DEAD) {
      const r = lexString(this.st, b, true);
      if (r === LEX_CLOSE) {
        const spelling = this.text + '"';
        if (!this.used.has(spelling) && !this.shape.named.has(spelling)) k.pop(s, spelling);
        return;
      }
      st = r === LEX_FAIL ? DEAD : r >> 1;
    }
    if (at === null && st === DEAD) return;
    k.enter(new Stack(new KeyFrame(this.shape, this.used, at, st, st === DEAD ? '' : this.text + String.fromCharCode(b)), s.next));
  }

  override freeChars(): number {
    return this.st === TEXT ? Infinity : -1;
  }
}

/** Waits under a key for its spelling, then goes on to the colon and that key's value. */
class AfterKey extends Expander {
  constructor(
    readonly shape: ObjectShape,
    readonly used: ReadonlySet<string>,
  ) {
    super();
  }
  override resume(spelling: string): Frame {
    return new KeyValue(this.shape, new Set(this.used).add(spelling), this.shape.valueOf(spelling));
  }
}

class KeyValue extends Expander {
  constructor(
    readonly shape: ObjectShape,
    readonly used: ReadonlySet<string>,
    readonly value: Value,
  ) {
    super();
  }
  override eps(s: Stack, k: Sink): void {
    const after = new Stack(GAP, new Stack(new Members(this.shape, this.used, false), s.next));
    k.enter(new Stack(GAP, new Stack(COLON, new Stack(GAP, new Stack(this.value.frame, after)))));
  }
}
