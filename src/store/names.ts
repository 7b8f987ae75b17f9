import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WasteError } from '../util/errors.js';

/** The demo container that ships with the package (models/demo). */
export const DEMO_MODEL = fileURLToPath(new URL('../../../models/demo', import.meta.url));

/** The name that always stands for the shipped demo model (a directory called so is `./demo`). */
export const DEMO_NAME = 'demo';

/** Whether `arg` is a model name rather than a path. */
export function isModelName(arg: string): boolean {
  return arg === DEMO_NAME;
}

/**
 * The directory a MODEL argument names: a known name (`demo`) or a path, as given. Everything that
 * takes a model — the CLI, `open()`, the server — goes through this, so a name means one thing.
 */
export function resolveModel(arg: string): string {
  if (typeof arg !== 'string' || arg === '') throw new WasteError('E_ARG', `a model is a name (${DEMO_NAME}) or a directory (got ${arg === '' ? 'an empty string' : typeof arg})`);
  if (arg !== DEMO_NAME) return arg;
  if (!fs.existsSync(path.join(DEMO_MODEL, 'manifest.json')))
    throw new WasteError('E_IO', `the demo model is not at ${DEMO_MODEL} (this copy of waste was installed without models/demo)`);
  return DEMO_MODEL;
}
