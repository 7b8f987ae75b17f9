import { InvalidArgumentError } from 'commander';
import { excerpt, quoted } from '../util/errors.js';

/** Parsers for option values; each throws commander's InvalidArgumentError with a clear reason. */
export function intArg(min: number, max = Number.MAX_SAFE_INTEGER) {
  return (value: string): number => {
    if (!/^-?\d+$/.test(value.trim())) throw new InvalidArgumentError(`expected an integer, got ${quoted(value)}`);
    const n = Number(value);
    if (n < min || n > max) throw new InvalidArgumentError(`must be between ${min} and ${max}`);
    return n;
  };
}

/** Token ids as "3,7,11" or "3 7 11". */
export function parseIds(value: string): number[] {
  const parts = value.split(/[\s,]+/).filter(Boolean);
  if (parts.length === 0) throw new InvalidArgumentError('expected at least one token id');
  return parts.map((p) => {
    if (!/^\d+$/.test(p)) throw new InvalidArgumentError(`${quoted(p)} is not a token id (a non-negative integer)`);
    return Number(p);
  });
}

/**
 * A usage error as the CLI prints it: one line, as every other failure is — commander's message
 * (its "error: " dropped, a suggestion it puts on a line of its own folded in, an argument it
 * quotes cut to an excerpt) and where to read the usage.
 */
export function usageLine(message: string): string {
  const text = message
    .trim()
    .replace(/^error: /, '')
    .replace(/'([^']*)'/g, (_m, q: string) => `'${excerpt(q)}'`)
    .split(/\s*\n\s*/)
    .join(' ');
  return `waste: ${text} (run with --help for usage)\n`;
}
