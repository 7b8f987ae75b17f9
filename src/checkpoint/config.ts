import * as path from 'node:path';
import { checkModelLinks } from '../util/model-dir.js';
import { readJson } from '../util/read.js';
import { Fields, type JsonObject } from '../util/fields.js';

/** A HuggingFace checkpoint's config.json: the raw object (kept for the manifest) and a field reader over it. */
export function readCheckpointConfig(dir: string): { raw: JsonObject; fields: Fields } {
  checkModelLinks(dir);
  const raw = readJson(path.join(dir, 'config.json'));
  const fields = Fields.root('config.json', raw);
  return { raw: raw as JsonObject, fields };
}
