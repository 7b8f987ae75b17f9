import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { WasteError, quoted } from '../util/errors.js';

/**
 * The local model store: `$WASTE_HOME` (default `~/.cache/waste`) holds `models/NAME/` (a
 * published container with its `store.json` record) and `downloads/NAME/` (a pull in progress: the
 * shards not yet converted). A model appears under `models/` only whole: it is converted in
 * `models/NAME.partial/` and renamed into place.
 */
export function wasteHome(): string {
  const env = process.env.WASTE_HOME;
  return path.resolve(env && env !== '' ? env : path.join(os.homedir(), '.cache', 'waste'));
}

export function modelsDir(): string {
  return path.join(wasteHome(), 'models');
}

export function downloadsDir(): string {
  return path.join(wasteHome(), 'downloads');
}

/** A store name: what a directory may be called on every file system, and never a path. */
export function checkStoreName(name: string): string {
  if (typeof name !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(name) || /\.(partial|identity)$/.test(name))
    throw new WasteError('E_ARG', `a model name is 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit, not ending in .partial or .identity (got ${quoted(String(name))})`);
  return name;
}

/**
 * The lock of a pull into `name` (held by pull, and by rm while it removes): dot-named, so no
 * store name (never starting with '.') can collide with it or with the files taking it makes.
 */
export function pullLockFile(name: string): string {
  return path.join(downloadsDir(), `.${name}.lock`);
}

/** The directory of stored model `name`, if there is one. */
export function storedModel(name: string): string | undefined {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(name)) return undefined;
  const dir = path.join(modelsDir(), name);
  return fs.existsSync(path.join(dir, 'manifest.json')) ? dir : undefined;
}
