import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WasteError } from '../util/errors.js';
import { modelsDir, storedModel } from './home.js';

/** The demo container that ships with the package (models/demo). */
export const DEMO_MODEL = fileURLToPath(new URL('../../../models/demo', import.meta.url));

/** The name that always stands for the shipped demo model (a directory called so is `./demo`). */
export const DEMO_NAME = 'demo';

/** Whether `arg` is a model name rather than a path: `demo`, or a model in the store that no path of that name shadows. */
export function isModelName(arg: string): boolean {
  return arg === DEMO_NAME || (!fs.existsSync(arg) && storedModel(arg) !== undefined);
}

/**
 * The directory a MODEL argument names. Everything that takes a model — the CLI, `open()`, the
 * server — goes through this, so a name means one thing. In order:
 * 1. `demo` is the shipped demo model (a directory called so is `./demo`);
 * 2. anything that exists on disk is that path (a directory you made wins over a stored model of
 *    the same name: what you can see in the current directory is what runs);
 * 3. a model in the store (`$WASTE_HOME/models/NAME`, see `waste list`);
 * 4. else the argument as a path (whose opening then fails naming it), or, when it could only be a
 *    name (no separator), an error naming both places looked in.
 */
export function resolveModel(arg: string): string {
  if (typeof arg !== 'string' || arg === '') throw new WasteError('E_ARG', `a model is a name (${DEMO_NAME}, or one in \`waste list\`) or a directory (got ${arg === '' ? 'an empty string' : typeof arg})`);
  if (arg === DEMO_NAME) {
    if (!fs.existsSync(path.join(DEMO_MODEL, 'manifest.json')))
      throw new WasteError('E_IO', `the demo model is not at ${DEMO_MODEL} (this copy of waste was installed without models/demo)`);
    return DEMO_MODEL;
  }
  if (fs.existsSync(arg)) return arg;
  const stored = storedModel(arg);
  if (stored) return stored;
  if (!arg.includes('/') && !arg.includes(path.sep) && /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(arg))
    throw new WasteError('E_IO', `no model ${arg}: not a directory here, nor a model in ${modelsDir()} (\`waste list\` shows those; \`waste pull\` adds one)`);
  return arg;
}
