import { type Grammar, alt, seq } from '../constrain/grammar.js';

/** A tool a request declares. */
export interface ToolDecl {
  name: string;
  description?: string;
  /** JSON Schema of the arguments (an object). */
  parameters: unknown;
}

/** Most calls one reply may make when parallel calls are allowed (the grammar is unrolled). */
export const MAX_PARALLEL = 4;

export const optional = (g: Grammar): Grammar => alt([seq([]), g]);
