import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WasteError } from '../util/errors.js';

/** The demo container that ships with the package (models/demo): the model when none is named. */
export const DEMO_MODEL = fileURLToPath(new URL('../../../models/demo', import.meta.url));

/** The model directory to open: the one named, else the demo model (with a clear error when it is missing). */
export function modelOrDemo(model: string | undefined): string {
  if (model !== undefined) return model;
  if (!fs.existsSync(path.join(DEMO_MODEL, 'manifest.json')))
    throw new WasteError('E_ARG', `no model given, and the demo model is not at ${DEMO_MODEL}: name a container directory`);
  return DEMO_MODEL;
}

/**
 * `run [model] [prompt]` and `eval [model] [prompt]`: with one argument it is the model when it names
 * an existing directory, else the prompt (for the demo model) — `waste run "Call me Ishmael"` works.
 */
export function modelAndPrompt(first: string | undefined, second: string | undefined): { model: string; prompt: string | undefined } {
  if (second !== undefined || first === undefined) return { model: modelOrDemo(first), prompt: second };
  if (isDirectory(first)) return { model: first, prompt: undefined };
  return { model: modelOrDemo(undefined), prompt: first };
}

function isDirectory(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}
