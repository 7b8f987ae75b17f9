import { CompileBoundError, type CompileLimits, CompileMeter, runSliced } from '../constrain/compile-meter.js';
import { type SchemaNode, compileSchemaSteps } from '../constrain/schema-compile.js';
import { WasteError } from '../util/errors.js';
import { ApiError, badRequest } from './errors.js';

/** Where each schema a request brings sits in it (a WeakMap: an entry lives as long as its request). */
const params = new WeakMap<object, string>();

/**
 * Note where a schema sits in the request (`tools[2].function.parameters`): the Host compiles it
 * when it prepares the turn, and a problem with it is a 400 naming that field.
 */
export function requestSchema(schema: unknown, param: string): unknown {
  if (schema !== null && typeof schema === 'object') params.set(schema, param);
  return schema;
}

/** The server's bounds on a request's schemas, as its flags name them. */
const BOUND_FLAGS: Record<keyof CompileLimits, string> = { schemaSize: '--max-schema-size', grammarStates: '--max-grammar-states' };

/**
 * Compile a request's schemas (each distinct one once), a slice at a time so the event loop keeps
 * serving, with one meter for them all: the request's whole cost is held to `limits`, and a compile
 * that would pass a bound stops there. A schema outside the enforceable subset, one past a bound,
 * and one no document satisfies are each a 400 naming the field the schema came in (as noted by
 * requestSchema, else `param`).
 */
export async function compileRequestSchemas(schemas: readonly { schema: unknown; param: string }[], limits: CompileLimits, pause?: () => Promise<void>): Promise<Map<unknown, SchemaNode>> {
  const meter = new CompileMeter(limits);
  const out = new Map<unknown, SchemaNode>();
  for (const { schema, param: fallback } of schemas) {
    if (out.has(schema)) continue;
    const param = (schema !== null && typeof schema === 'object' ? params.get(schema) : undefined) ?? fallback;
    let node: SchemaNode;
    try {
      node = await runSliced(compileSchemaSteps(schema, meter), pause);
    } catch (e) {
      if (e instanceof CompileBoundError)
        throw new ApiError(
          400,
          e.bound === 'schemaSize'
            ? `${param}: the request's JSON Schemas hold more than ${e.limit} subschemas, names and enum values, this server's bound (${BOUND_FLAGS.schemaSize})`
            : `${param}: the request's JSON Schemas compile to more than ${e.limit} grammar states, this server's bound (${BOUND_FLAGS.grammarStates})`,
          'invalid_request_error',
          e.bound === 'schemaSize' ? 'schema_too_large' : 'grammar_too_large',
          param,
        );
      if (e instanceof WasteError && e.code === 'E_ARG') throw badRequest(`${param}: ${e.message}`, param);
      throw e;
    }
    if (!node.sat) throw badRequest(`${param}: no JSON document satisfies this schema, so no reply could be finished`, param);
    out.set(schema, node);
  }
  return out;
}
