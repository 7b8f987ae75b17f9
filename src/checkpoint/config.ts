import * as path from 'node:path';
import { type KimiLinearConfig, parseKimiLinearConfig } from '../model/kimi-linear/config.js';
import { WasteError } from '../util/errors.js';
import { readJson } from '../util/read.js';
import { Fields, type JsonObject } from '../util/fields.js';

/** A HuggingFace checkpoint's config.json: the raw object (kept for the manifest) and the parsed config. */
export function readCheckpointConfig(dir: string): { raw: JsonObject; cfg: KimiLinearConfig } {
  const file = path.join(dir, 'config.json');
  const raw = readJson(file);
  const fields = Fields.root('config.json', raw);
  const modelType = fields.given('model_type') ? fields.raw('model_type') : 'kimi_linear';
  if (modelType !== 'kimi_linear') throw new WasteError('E_UNSUPPORTED', `unsupported: config.json model_type ${JSON.stringify(modelType)} (this build runs kimi_linear models)`);
  return { raw: raw as JsonObject, cfg: parseKimiLinearConfig(fields) };
}
