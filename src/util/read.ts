import * as fs from 'node:fs';
import { WasteError, fromSystemError } from './errors.js';

/** A file's bytes; a missing or unreadable file is one WasteError naming it. */
export function readBytes(file: string): Buffer {
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw fromSystemError(file, e);
  }
}

/** A file's text (UTF-8). */
export function readText(file: string): string {
  return readBytes(file).toString('utf8');
}

/** A JSON file, parsed; invalid JSON is one WasteError naming the file and what is wrong. */
export function readJson(file: string): unknown {
  const text = readText(file);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new WasteError('E_FORMAT', `${file}: not valid JSON (${(e as Error).message})`);
  }
}
