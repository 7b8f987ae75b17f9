/**
 * What a constrained reply must spell, as pieces over bytes. A `json` piece is one JSON value valid
 * against a schema (see schema.ts for what is enforced); the rest combine pieces so a caller can
 * frame JSON in a model's own markers, e.g. a tool call:
 * `seq(lit('<|tool_call_begin|>'), json(schema), lit('<|tool_call_end|>'))`.
 */
export type Grammar =
  | { kind: 'lit'; text: string; tokens?: LitTokens }
  | { kind: 'json'; schema: unknown }
  | { kind: 'seq'; items: Grammar[] }
  | { kind: 'alt'; items: Grammar[] }
  | { kind: 'repeat'; item: Grammar; min: number; max: number; sep?: string };

/**
 * Which tokens may spell a literal: by default any (ordinary tokens, and a special token where the
 * literal spells its whole text); "special" only special tokens — markup whose structure is decided
 * by token id, where the same characters spelled by ordinary tokens would be text; "plain" only
 * ordinary tokens — text that must stay text, such as a name a client chose.
 */
export type LitTokens = 'special' | 'plain';

/** Exactly this text (UTF-8), spelled by the tokens `tokens` allows. */
export function lit(text: string, tokens?: LitTokens): Grammar {
  return tokens ? { kind: 'lit', text, tokens } : { kind: 'lit', text };
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
