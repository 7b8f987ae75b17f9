import type { TokenVocab } from './vocab.js';

/**
 * Runs of whitespace in a constrained reply are bounded, so a model cannot spend its tokens on
 * blanks (a small model offered JSON wrote 298 spaces in a row inside a key). Between JSON values
 * the grammar itself allows little (json-text.ts: one space, or a line break and at most 20 of
 * indentation); inside strings it allows any text, so the bound is kept here, over the bytes the
 * reply writes: at most MAX_BLANK_RUN bytes in a row of spaces, tabs, line breaks and the escapes
 * \n, \t and \r (each escape's two bytes count). Deep indentation in code sent as a string still
 * fits. A token that would make a longer run is masked — unless the grammar allows nothing else
 * there (a literal or an enum value that holds such a run), which it then must be allowed.
 */
export const MAX_BLANK_RUN = 64;

const BACKSLASH = 0x5c;
const isBlank = (b: number) => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
// n, t, r after a backslash: an escaped line break, tab or carriage return
const isBlankEscape = (b: number) => b === 0x6e || b === 0x74 || b === 0x72;
const CAP = 0xffff;

/** Each token's whitespace, read after a backslash still open (entry 1) or not (entry 0). */
interface Entry {
  /** Blank bytes before its first other byte (all of them when it has none). */
  lead: Uint16Array;
  /** The longest run between two other bytes, and the run it ends with. */
  inner: Uint16Array;
  trail: Uint16Array;
  /** 1: it has no other byte (its blanks extend the run it meets); 2: it ends on an open backslash. */
  flags: Uint8Array;
  /** Tokens no run can take (a run inside them is too long already). */
  always: Int32Array;
  /** Tokens that begin with blanks, longest lead first. */
  byLead: Int32Array;
}

const ALL_BLANK = 1;
const OPEN_ESCAPE = 2;

const tables = new WeakMap<TokenVocab, [Entry, Entry]>();

function entryFor(vocab: TokenVocab, escaped: boolean): Entry {
  const n = vocab.size;
  const e: Entry = { lead: new Uint16Array(n), inner: new Uint16Array(n), trail: new Uint16Array(n), flags: new Uint8Array(n), always: new Int32Array(0), byLead: new Int32Array(0) };
  const always: number[] = [];
  const leading: number[] = [];
  for (let id = 0; id < n; id++) {
    const bytes = vocab.bytes(id);
    let pending = escaped;
    let run = 0;
    let lead = -1;
    let inner = 0;
    const other = () => {
      if (lead < 0) lead = run;
      else inner = Math.max(inner, run);
      run = 0;
    };
    for (const b of bytes) {
      if (pending) {
        pending = false;
        if (isBlankEscape(b)) run += 2;
        else other();
      } else if (b === BACKSLASH) pending = true;
      else if (isBlank(b)) run++;
      else other();
    }
    const blank = lead < 0;
    e.lead[id] = Math.min(CAP, blank ? run : lead);
    e.inner[id] = Math.min(CAP, inner);
    e.trail[id] = Math.min(CAP, blank ? 0 : run);
    e.flags[id] = (blank ? ALL_BLANK : 0) | (pending ? OPEN_ESCAPE : 0);
    if (e.inner[id] > MAX_BLANK_RUN || e.trail[id] > MAX_BLANK_RUN || e.lead[id] > MAX_BLANK_RUN) always.push(id);
    else if (e.lead[id] > 0) leading.push(id);
  }
  leading.sort((a, b) => e.lead[b] - e.lead[a]);
  e.always = Int32Array.from(always);
  e.byLead = Int32Array.from(leading);
  return e;
}

function tablesOf(vocab: TokenVocab): [Entry, Entry] {
  let t = tables.get(vocab);
  if (!t) tables.set(vocab, (t = [entryFor(vocab, false), entryFor(vocab, true)]));
  return t;
}

/** The run of blanks a reply has ended with so far, and whether it ended on an open backslash. */
export class BlankRuns {
  private run = 0;
  private escaped = false;
  private table: [Entry, Entry] | undefined;
  private banned: number[] = [];

  constructor(private readonly vocab: TokenVocab) {}

  /**
   * Mask (in `out`, where `allowed` tokens are finite) the tokens that would make a run longer than
   * the bound — unless that would leave none.
   */
  restrict(out: Float32Array, allowed: number): void {
    const e = (this.table ??= tablesOf(this.vocab))[this.escaped ? 1 : 0];
    const banned = this.banned;
    banned.length = 0;
    for (const id of e.always) if (id < out.length && out[id] !== -Infinity) banned.push(id);
    const room = MAX_BLANK_RUN - this.run;
    const by = e.byLead;
    for (let i = 0; i < by.length && e.lead[by[i]] > room; i++) if (by[i] < out.length && out[by[i]] !== -Infinity) banned.push(by[i]);
    if (banned.length >= allowed) return;
    for (const id of banned) out[id] = -Infinity;
  }

  /** The token was written. */
  accept(token: number): void {
    if (token < 0 || token >= this.vocab.size) return;
    const e = (this.table ??= tablesOf(this.vocab))[this.escaped ? 1 : 0];
    const f = e.flags[token];
    this.run = f & ALL_BLANK ? Math.min(CAP, this.run + e.lead[token]) : e.trail[token];
    this.escaped = (f & OPEN_ESCAPE) !== 0;
  }
}
