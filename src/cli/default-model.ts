import * as fs from 'node:fs';
import { DEMO_NAME, isModelName, resolveModel } from '../store/names.js';

/** The model directory to open: the one named (a path, or a name such as `demo`), else the demo model. */
export function modelOrDemo(model: string | undefined): string {
  return resolveModel(model ?? DEMO_NAME);
}

/**
 * `run [model] [prompt]` and the like: with one argument it is the model when it names a model (an
 * existing directory, or a name such as `demo`), else the prompt (for the demo model) — `waste run
 * "Call me Ishmael"` works.
 */
export function modelAndPrompt(first: string | undefined, second: string | undefined): { model: string; prompt: string | undefined } {
  if (second !== undefined || first === undefined) return { model: modelOrDemo(first), prompt: second };
  if (isModelName(first) || isDirectory(first)) return { model: modelOrDemo(first), prompt: undefined };
  return { model: modelOrDemo(undefined), prompt: first };
}

function isDirectory(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}
