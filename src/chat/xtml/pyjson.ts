import { WasteError } from '../../util/errors.js';

/**
 * JSON written as the release's renderer writes it — Python's `json.dumps(…, ensure_ascii=False)` —
 * because those bytes are part of the prompt the model was trained on. Two separator styles are in
 * use: compact (`,` `:`) for tool declarations and schemas, Python's default (`, ` `: `) for a tool
 * argument's value. With `sort`, every object's keys are in code-point order, as Python's
 * `sorted()` puts them (JavaScript's default sort compares UTF-16 units, which differs past U+FFFF).
 *
 * What cannot be reproduced from a parsed JavaScript value: a number written `1.0` (Python keeps a
 * float and writes `1.0`; JavaScript has only `1`), and the order of integer-like keys in an
 * unsorted object (JavaScript objects put them first).
 */
export function pyDumps(value: unknown, opts: { sort?: boolean; compact?: boolean } = {}): string {
  const comma = opts.compact ? ',' : ', ';
  const colon = opts.compact ? ':' : ': ';
  const seen = new Set<object>();
  const write = (v: unknown, at: string): string => {
    if (v === null) return 'null';
    if (typeof v === 'boolean') return v ? 'true' : 'false';
    if (typeof v === 'number') return pyNumber(v);
    if (typeof v === 'string') return JSON.stringify(v);
    if (typeof v !== 'object') throw new WasteError('E_FORMAT', `${at}: ${typeof v} is not JSON`);
    if (seen.has(v)) throw new WasteError('E_FORMAT', `${at}: a value that contains itself is not JSON`);
    seen.add(v);
    let out: string;
    if (Array.isArray(v)) out = `[${v.map((x, i) => write(x, `${at}[${i}]`)).join(comma)}]`;
    else {
      const keys = Object.keys(v);
      if (opts.sort) keys.sort(byCodePoint);
      out = `{${keys.map((k) => `${JSON.stringify(k)}${colon}${write((v as Record<string, unknown>)[k], `${at}.${k}`)}`).join(comma)}}`;
    }
    seen.delete(v);
    return out;
  };
  return write(value, 'value');
}

/** Python's string order: by code point. */
export function byCodePoint(a: string, b: string): number {
  const x = [...a];
  const y = [...b];
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0)! - y[i].codePointAt(0)!;
    if (d) return d;
  }
  return x.length - y.length;
}

/**
 * A number as Python writes it: an integral value as an int (all its digits, where JavaScript
 * would switch to an exponent at 1e21), anything else as `repr(float)` — the same shortest digits
 * JavaScript finds, in Python's layout (an exponent below 1e-4, with at least two digits).
 */
export function pyNumber(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? 'NaN' : x > 0 ? 'Infinity' : '-Infinity';
  if (Number.isInteger(x)) return BigInt(x).toString();
  const [mant, e] = x.toExponential().split('e');
  const exp = Number(e);
  if (exp >= -4 && exp < 16) return String(x);
  return `${mant}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
}

/** Python's `str.isspace()` characters: JavaScript's `trim()` knows U+FEFF and not U+001C–U+001F or U+0085. */
const PY_SPACE = '\t\n\u000b\f\r\u001c\u001d\u001e\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000';
const PY_STRIP = new RegExp(`^[${PY_SPACE}]+|[${PY_SPACE}]+$`, 'g');

/** Python's `str.strip()`. */
export function pyStrip(s: string): string {
  return s.replace(PY_STRIP, '');
}
