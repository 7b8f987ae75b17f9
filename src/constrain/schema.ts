import { Ajv2020 } from 'ajv/dist/2020.js';
import { WasteError, quoted } from '../util/errors.js';
import { CompileMeter, type Steps, runNow } from './compile-meter.js';

/*
 * The JSON Schema subset sampling can enforce, byte by byte:
 *   type (a name or a list; integer vs number), enum, const, properties, required,
 *   additionalProperties (false / true / a schema), items, prefixItems, minItems, maxItems,
 *   minLength, maxLength (characters), anyOf, oneOf (enforced as anyOf: a value matching two
 *   branches is accepted), allOf, $ref to a local JSON pointer (#, #/$defs/…, #/definitions/…;
 *   recursion allowed), nullable: true (OpenAPI: null is allowed as well).
 * Annotations are ignored: title, description, default, examples, $schema, $id (refs resolve in
 * the root document only), $comment, deprecated, readOnly, writeOnly, strict, and format — which
 * is NOT enforced (a "date-time" string may be any string).
 * Every other keyword (pattern, minimum, multipleOf, not, if/then/else, uniqueItems, …) is refused
 * with an error naming it and where it is, rather than silently not enforced.
 *
 * What is generated is a subset of the valid documents: an enum or const value is written as
 * JSON.stringify writes it (an object value in the schema's key order), object keys in their
 * JSON.stringify spelling, numbers with at most 15 integer and 15 fraction digits and a 2-digit
 * exponent (json-text.ts), and whitespace bounded per gap.
 */
const ANNOTATIONS = new Set(['title', 'description', 'default', 'examples', '$schema', '$id', '$comment', 'format', 'strict', 'deprecated', 'readOnly', 'writeOnly']);
const TYPES = new Set(['null', 'boolean', 'integer', 'number', 'string', 'array', 'object']);
const SUPPORTED =
  'type, enum, const, properties, required, additionalProperties, items, prefixItems, minItems, maxItems, minLength, maxLength, anyOf, oneOf, allOf, $ref, $defs, definitions, nullable';

/** Lower bounds (minItems, minLength) above this are refused. */
const MAX_LOWER_BOUND = 100_000;
/** Nesting of schemas inside schemas, at most. */
const MAX_DEPTH = 64;

/**
 * Check a JSON Schema is within what sampling can enforce; throws WasteError('E_ARG', message
 * naming the unsupported keyword and its JSON pointer) otherwise, or when the schema is malformed.
 */
export function checkSchema(schema: unknown): void {
  runNow(checkSchemaSteps(schema, new CompileMeter()));
}

/** Where a subschema is (its JSON pointer), spelled only when an error needs it. */
type At = () => string;

/**
 * checkSchema as steps that give way every slice of the meter's work, counting the schema's size
 * on the meter (CompileBoundError past its limit: a list is counted before it is looked at).
 */
export function* checkSchemaSteps(schema: unknown, meter: CompileMeter): Steps<void> {
  const seen = new Set<unknown>();
  let depth = 0;
  function* walk(s: unknown, at: At): Steps<void> {
    meter.schema();
    if (meter.due) yield;
    if (typeof s === 'boolean') return;
    if (depth >= MAX_DEPTH) throw bad(at(), `schemas nested deeper than ${MAX_DEPTH} levels are not supported`);
    depth++;
    try {
      yield* walkObject(s, at);
    } finally {
      depth--;
    }
  }
  function* walkObject(s: unknown, at: At): Steps<void> {
    if (!isPlainObject(s)) throw bad(at(), `a schema must be an object or a boolean (got ${describe(s)})`);
    if (seen.has(s)) return;
    seen.add(s);
    for (const key in s) {
      if (!Object.hasOwn(s, key)) continue;
      const v = s[key];
      meter.tick();
      if (ANNOTATIONS.has(key)) continue;
      // the pointer is spelled only where it is needed: most keys never need it
      const here = () => `${at()}/${escapePointer(key)}`;
      switch (key) {
        case 'type': {
          const names = Array.isArray(v) ? v : [v];
          meter.schema(names.length);
          if (names.length === 0 || names.some((n) => typeof n !== 'string' || !TYPES.has(n)))
            throw bad(here(), `must be one of ${[...TYPES].join(', ')} or a non-empty list of them (got ${describe(v)})`);
          break;
        }
        case 'enum':
          if (!Array.isArray(v)) throw bad(here(), `must be an array (got ${describe(v)})`);
          meter.schema(v.length);
          break;
        case 'const':
          meter.schema();
          break;
        case 'properties':
        case '$defs':
        case 'definitions':
          if (!isPlainObject(v)) throw bad(here(), `must be an object of schemas (got ${describe(v)})`);
          for (const name in v) if (Object.hasOwn(v, name)) yield* walk(v[name], () => `${here()}/${escapePointer(name)}`);
          break;
        case 'required':
          if (!Array.isArray(v)) throw bad(here(), `must be an array of strings (got ${describe(v)})`);
          meter.schema(v.length);
          if (v.some((n) => typeof n !== 'string')) throw bad(here(), `must be an array of strings (got ${describe(v)})`);
          break;
        case 'additionalProperties':
          yield* walk(v, here);
          break;
        case 'items':
          if (Array.isArray(v)) throw bad(here(), 'an array of schemas (the draft-07 tuple form) is not supported: use prefixItems');
          yield* walk(v, here);
          break;
        case 'prefixItems':
        case 'anyOf':
        case 'oneOf':
        case 'allOf':
          if (!Array.isArray(v) || (key !== 'prefixItems' && v.length === 0)) throw bad(here(), `must be a non-empty array of schemas (got ${describe(v)})`);
          for (let i = 0; i < v.length; i++) yield* walk(v[i], () => `${here()}/${i}`);
          break;
        case 'minItems':
        case 'maxItems':
        case 'minLength':
        case 'maxLength':
          if (!Number.isSafeInteger(v) || (v as number) < 0) throw bad(here(), `must be a non-negative integer (got ${describe(v)})`);
          // a lower bound no reply could reach is a mistake (or an attack on the compiler), not a schema
          if (key.startsWith('min') && (v as number) > MAX_LOWER_BOUND) throw bad(here(), `must be at most ${MAX_LOWER_BOUND} (got ${v})`);
          break;
        case 'nullable':
          if (typeof v !== 'boolean') throw bad(here(), `must be true or false (got ${describe(v)})`);
          break;
        case '$ref':
          if (typeof v !== 'string') throw bad(here(), `must be a string (got ${describe(v)})`);
          yield* walk(resolveRef(schema, v, here()), () => v);
          break;
        default:
          throw new WasteError(
            'E_ARG',
            `JSON Schema keyword "${clip(key)}" at ${at()}/${escapePointer(clip(key))} cannot be enforced while sampling (supported: ${SUPPORTED}; annotations such as description and format are ignored)`,
          );
      }
    }
  }
  yield* walk(schema, () => '#');
}

/** The schema a local $ref names (#, #/$defs/x, #/definitions/x, or any JSON pointer into the root). */
export function resolveRef(root: unknown, ref: string, at: string): unknown {
  if (!ref.startsWith('#')) throw bad(at, `${quoted(ref)}: only references within the schema (#/$defs/…, #/definitions/…) are supported`);
  let pointer: string;
  try {
    pointer = decodeURIComponent(ref.slice(1));
  } catch {
    throw bad(at, `${quoted(ref)} is not a valid JSON pointer`);
  }
  if (pointer !== '' && !pointer.startsWith('/')) throw bad(at, `${quoted(ref)}: anchors are not supported, only JSON pointers such as #/$defs/name`);
  let node: unknown = root;
  for (const raw of pointer === '' ? [] : pointer.slice(1).split('/')) {
    const token = raw.replace(/~1/g, '/').replace(/~0/g, '~');
    const next = Array.isArray(node) ? (/^(0|[1-9]\d*)$/.test(token) ? node[Number(token)] : undefined) : isPlainObject(node) && Object.hasOwn(node, token) ? node[token] : undefined;
    if (next === undefined) throw bad(at, `${quoted(ref)} names nothing in the schema`);
    node = next;
  }
  if (typeof node !== 'boolean' && !isPlainObject(node)) throw bad(at, `${quoted(ref)} does not name a schema`);
  return node;
}

/**
 * An ajv-compiled validator (ajv 8, JSON Schema 2020-12, strict off, formats not validated) for a
 * final check of a reply: null, or an error message. It checks what sampling enforces: oneOf is
 * read as anyOf and nullable: true as "or null", as the sampler reads them.
 */
export function validator(schema: unknown): (value: unknown) => string | null {
  const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
  let validate: ReturnType<typeof ajv.compile>;
  try {
    validate = ajv.compile(asAjvSchema(schema) as object | boolean as object);
  } catch (e) {
    throw new WasteError('E_ARG', `invalid JSON Schema: ${(e as Error).message}`);
  }
  return (value) => (validate(value) ? null : ajv.errorsText(validate.errors, { dataVar: 'value' }));
}

/** The schema rewritten for ajv: oneOf → anyOf, nullable: true → anyOf [null, the rest]. */
function asAjvSchema(s: unknown): unknown {
  if (!isPlainObject(s)) return s;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(s)) {
    if (key === 'nullable') continue;
    if (key === 'properties' || key === '$defs' || key === 'definitions') out[key] = isPlainObject(v) ? mapValues(v, asAjvSchema) : v;
    else if (key === 'additionalProperties' || key === 'items') out[key] = asAjvSchema(v);
    else if (key === 'prefixItems' || key === 'anyOf' || key === 'allOf') out[key] = Array.isArray(v) ? v.map(asAjvSchema) : v;
    else if (key === 'oneOf') out.anyOf = Array.isArray(v) ? v.map(asAjvSchema) : v;
    else out[key] = v;
  }
  if (Array.isArray(s.anyOf) && Array.isArray(s.oneOf)) {
    delete out.anyOf;
    out.allOf = [...((out.allOf as unknown[]) ?? []), { anyOf: s.anyOf.map(asAjvSchema) }, { anyOf: s.oneOf.map(asAjvSchema) }];
  }
  if (s.nullable !== true) return out;
  // $defs stay where they were, so references into them still resolve
  const outer: Record<string, unknown> = {};
  for (const key of ['$defs', 'definitions', '$schema', '$id']) {
    if (key in out) {
      outer[key] = out[key];
      delete out[key];
    }
  }
  outer.anyOf = [{ type: 'null' }, out];
  return outer;
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function mapValues(o: Record<string, unknown>, f: (v: unknown) => unknown): Record<string, unknown> {
  return Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v)]));
}

export function escapePointer(key: string): string {
  return key.replace(/~/g, '~0').replace(/\//g, '~1');
}

function bad(at: string, what: string): WasteError {
  return new WasteError('E_ARG', `JSON Schema at ${at.length > 200 ? `${at.slice(0, 197)}...` : at}: ${what}`);
}

/** A key as errors quote it: at most 60 characters of it. */
const clip = (key: string) => (key.length > 60 ? `${key.slice(0, 57)}...` : key);

function describe(v: unknown): string {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
}
