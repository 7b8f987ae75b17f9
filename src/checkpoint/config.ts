import * as fs from 'node:fs';
import * as path from 'node:path';
import { type KimiLinearConfig, parseKimiLinearConfig } from '../model/kimi-linear/config.js';
import { WasteError, fromSystemError } from '../util/errors.js';
import { Fields, type JsonObject } from '../util/fields.js';

/** A HuggingFace checkpoint's config.json: the raw object (kept for the manifest) and the parsed config. */
export function readCheckpointConfig(dir: string): { raw: JsonObject; cfg: KimiLinearConfig } {
  const file = path.join(dir, 'config.json');
  let raw: unknown;
  try {
    raw = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw e instanceof SyntaxError ? new WasteError('E_FORMAT', `${file}: not valid JSON (${e.message})`) : fromSystemError(file, e);
  }
  const fields = Fields.root('config.json', raw);
  const modelType = fields.given('model_type') ? fields.raw('model_type') : 'kimi_linear';
  if (modelType !== 'kimi_linear') throw new WasteError('E_UNSUPPORTED', `unsupported: config.json model_type ${JSON.stringify(modelType)} (this build runs kimi_linear models)`);
  return { raw: raw as JsonObject, cfg: parseKimiLinearConfig(fields) };
}
