/**
 * What a constrained reply must spell, as pieces over bytes. A `json` piece is one JSON value valid
 * against a schema (see schema.ts for what is enforced); the rest combine pieces so a caller can
 * frame JSON in a model's own markers, e.g. a tool call:
 * `seq(lit('<|tool_call_begin|>'), json(schema), lit('<|tool_call_end|>'))`.
 */
export type Grammar =
  | { kind: 'lit'; text: string }
  | { kind: 'json'; schema: unknown }
  | { kind: 'seq'; items: Grammar[] }
  | { kind: 'alt'; items: Grammar[] }
  | { kind: 'repeat'; item: Grammar; min: number; max: number; sep?: string };

/** Exactly this text (UTF-8). Where it spells a special token's whole text, that token may be sampled too. */
export function lit(text: string): Grammar {
  return { kind: 'lit', text };
}

/** One JSON value valid against the schema; `true` or `{}` = any JSON value. */
export function json(schema: unknown = true): Grammar {
  return { kind: 'json', schema };
}

/** The pieces one after another: seq(a, b, c) or seq([a, b, c]); seq() matches the empty text. */
export function seq(...items: (Grammar | readonly Grammar[])[]): Grammar {
  return { kind: 'seq', items: items.flat() };
}

/** Any one of the pieces: alt(a, b) or alt([a, b]). */
export function alt(...items: (Grammar | readonly Grammar[])[]): Grammar {
  return { kind: 'alt', items: items.flat() };
}

/** min..max copies of item (max may be Infinity), with sep between consecutive copies. */
export function repeat(item: Grammar, min = 0, max = Infinity, sep?: string): Grammar {
  return sep === undefined ? { kind: 'repeat', item, min, max } : { kind: 'repeat', item, min, max, sep };
}
