import { WasteError } from '../util/errors.js';
import { yieldToLoop } from '../util/yield-to-loop.js';

/**
 * What compiling JSON Schemas may cost. One meter counts every schema of a request, so a client
 * gets the same bound whether it sends one large schema or many small ones (128 tools, say).
 */
export interface CompileLimits {
  /** Most subschemas, property names, required names, type names and enum/const values, counted as the schemas are checked. */
  schemaSize?: number;
  /**
   * Most states of the compiled form: parsed subschemas, nodes, their alternatives and
   * properties, and the bytes of enum values and property names the matcher keeps in tries —
   * counted as they are made, so a compile that would be too large stops there.
   */
  grammarStates?: number;
}

/** A bound of CompileLimits was reached; the compile stopped there. */
export class CompileBoundError extends WasteError {
  constructor(
    readonly bound: keyof CompileLimits,
    readonly limit: number,
  ) {
    super(
      'E_ARG',
      bound === 'schemaSize'
        ? `the JSON Schemas hold more than ${limit} subschemas, names and enum values, the most that is compiled`
        : `the JSON Schemas compile to more than ${limit} grammar states, the most that is kept`,
    );
  }
}

/** Units of work between two turns of the event loop when a compile runs in slices. */
export const COMPILE_SLICE = 1024;

/**
 * Counts what a compile does: its size against the limits (throwing CompileBoundError the moment
 * one is passed), and its work, so the compile's steps can give way every `slice` units.
 */
export class CompileMeter {
  schemaSize = 0;
  states = 0;
  /** Units of work counted so far (checking, building, analysing). */
  work = 0;
  private since = 0;

  constructor(
    readonly limits: CompileLimits = {},
    readonly slice = COMPILE_SLICE,
  ) {}

  /** n more units of schema (a subschema, a name, an enum value), counted in one step of work. */
  schema(n = 1): void {
    this.schemaSize += n;
    this.tick();
    const max = this.limits.schemaSize;
    if (max !== undefined && this.schemaSize > max) throw new CompileBoundError('schemaSize', max);
  }

  /** n more states of the compiled form, made in one step of work. */
  state(n = 1): void {
    this.states += n;
    this.tick();
    const max = this.limits.grammarStates;
    if (max !== undefined && this.states > max) throw new CompileBoundError('grammarStates', max);
  }

  /** n units of work (a step, or a loop of n done at once). */
  tick(n = 1): void {
    this.work += n;
    this.since += n;
  }

  /** Whether a slice of work is done since the last time this said so (the steps then yield). */
  get due(): boolean {
    if (this.since < this.slice) return false;
    this.since = 0;
    return true;
  }
}

/** Steps of a compile: each `yield` is a point where the event loop may have a turn. */
export type Steps<T> = Generator<void, T, void>;

/** Run the steps to their end now. */
export function runNow<T>(steps: Steps<T>): T {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
  }
}

/** Run the steps a slice at a time, awaiting `pause` (a turn of the event loop) between slices. */
export async function runSliced<T>(steps: Steps<T>, pause: () => Promise<void> = yieldToLoop): Promise<T> {
  for (;;) {
    const r = steps.next();
    if (r.done) return r.value;
    await pause();
  }
}
