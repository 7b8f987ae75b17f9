import { WasteError } from './errors.js';

/**
 * Typed reads of untrusted JSON. Each failure names the file and the field path, e.g.
 * "manifest.json: config.hidden_size must be an integer in 1..1048576 (got -3)".
 */
export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
export type JsonObject = { [k: string]: Json };

export class Fields {
  constructor(
    readonly file: string,
    readonly obj: JsonObject,
    readonly path: string,
  ) {}

  static root(file: string, value: unknown): Fields {
    if (!isObject(value)) throw new WasteError('E_FORMAT', `${file}: expected a JSON object at the top level`);
    return new Fields(file, value, '');
  }

  private name(key: string): string {
    return this.path ? `${this.path}.${key}` : key;
  }

  fail(key: string, what: string, got?: unknown): WasteError {
    const shown = got === undefined ? '' : ` (got ${describe(got)})`;
    return new WasteError('E_FORMAT', `${this.file}: ${this.name(key)} ${what}${shown}`);
  }

  has(key: string): boolean {
    return Object.prototype.hasOwnProperty.call(this.obj, key) && this.obj[key] !== undefined;
  }

  /** Present and not null. */
  given(key: string): boolean {
    return this.has(key) && this.obj[key] !== null;
  }

  raw(key: string): Json | undefined {
    return this.has(key) ? this.obj[key] : undefined;
  }

  int(key: string, min: number, max: number, fallback?: number): number {
    if (!this.given(key)) {
      if (fallback !== undefined) return fallback;
      throw this.fail(key, `is required (an integer in ${min}..${max})`);
    }
    const v = this.obj[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
      throw this.fail(key, `must be an integer in ${min}..${max}`, v);
    return v;
  }

  num(key: string, min: number, max: number, fallback?: number, exclusiveMin = false): number {
    if (!this.given(key)) {
      if (fallback !== undefined) return fallback;
      throw this.fail(key, `is required (a number)`);
    }
    const v = this.obj[key];
    const lowOk = typeof v === 'number' && (exclusiveMin ? v > min : v >= min);
    if (typeof v !== 'number' || !Number.isFinite(v) || !lowOk || v > max)
      throw this.fail(key, `must be a number in ${exclusiveMin ? '(' : '['}${min}, ${max}]`, v);
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    if (!this.given(key)) return fallback;
    const v = this.obj[key];
    if (typeof v !== 'boolean') throw this.fail(key, 'must be true or false', v);
    return v;
  }

  str(key: string, fallback?: string, maxLen = 4096): string {
    if (!this.given(key)) {
      if (fallback !== undefined) return fallback;
      throw this.fail(key, 'is required (a string)');
    }
    const v = this.obj[key];
    if (typeof v !== 'string' || v.length > maxLen) throw this.fail(key, `must be a string of at most ${maxLen} characters`, v);
    return v;
  }

  intList(key: string, min: number, max: number, maxLen: number): number[] | undefined {
    if (!this.given(key)) return undefined;
    const v = this.obj[key];
    if (!Array.isArray(v) || v.length > maxLen) throw this.fail(key, `must be a list of at most ${maxLen} integers`, v);
    return v.map((x, i) => {
      if (typeof x !== 'number' || !Number.isInteger(x) || x < min || x > max)
        throw this.fail(`${key}[${i}]`, `must be an integer in ${min}..${max}`, x);
      return x;
    });
  }

  object(key: string): Fields {
    const v = this.obj[key];
    if (!this.given(key) || !isObject(v)) throw this.fail(key, 'is required (an object)', this.raw(key));
    return new Fields(this.file, v, this.name(key));
  }

  optionalObject(key: string): Fields | undefined {
    if (!this.given(key)) return undefined;
    return this.object(key);
  }

  array(key: string, maxLen: number): Json[] {
    const v = this.obj[key];
    if (!this.given(key) || !Array.isArray(v)) throw this.fail(key, 'is required (a list)', this.raw(key));
    if (v.length > maxLen) throw this.fail(key, `has ${v.length} entries, more than the ${maxLen} allowed`);
    return v;
  }

  /** A child view over an array element or object member that must itself be an object. */
  child(value: Json, label: string): Fields {
    if (!isObject(value)) throw new WasteError('E_FORMAT', `${this.file}: ${this.name(label)} must be an object`);
    return new Fields(this.file, value, this.name(label));
  }
}

export function isObject(v: unknown): v is JsonObject {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? v.slice(0, 40) + '…' : v);
  if (Array.isArray(v)) return `a list of ${v.length}`;
  if (v === null) return 'null';
  if (typeof v === 'object') return 'an object';
  return String(v);
}
