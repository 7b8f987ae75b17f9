import * as fs from 'node:fs';
import * as path from 'node:path';
import { WasteError, excerpt } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { checkModelLinks } from '../util/model-dir.js';
import { readJson } from '../util/read.js';

/** The sampling settings a model recommends for itself (generation_config.json); what a caller sets explicitly wins. */
export interface GenerationDefaults {
  temperature?: number;
  topK?: number;
  topP?: number;
  minP?: number;
  repetitionPenalty?: number;
  maxTokens?: number;
}

/** HuggingFace generation_config.json keys → ours, with the range each must be in. */
const KEYS: [string, keyof GenerationDefaults, number, number][] = [
  ['temperature', 'temperature', 0, 100],
  ['top_k', 'topK', 0, 2 ** 31],
  ['top_p', 'topP', 1e-9, 1],
  ['min_p', 'minP', 0, 1],
  ['repetition_penalty', 'repetitionPenalty', 0.01, 100],
  ['max_new_tokens', 'maxTokens', 1, 2 ** 31],
];

/**
 * A model directory's `generation_config.json` (as HuggingFace checkpoints ship it, copied into the
 * container by `convert`): its sampling settings, or none when there is no such file. `do_sample:
 * false` means greedy, whatever the temperature says, as in transformers.
 */
export function readGenerationDefaults(dir: string): GenerationDefaults {
  checkModelLinks(dir);
  const file = path.join(dir, 'generation_config.json');
  if (!fs.existsSync(file)) return {};
  const doc = readJson(file);
  if (!isObject(doc)) throw new WasteError('E_FORMAT', `${file}: not a JSON object`);
  const out: GenerationDefaults = {};
  for (const [key, ours, lo, hi] of KEYS) {
    const v = doc[key];
    if (v === undefined || v === null) continue;
    if (typeof v !== 'number' || !(v >= lo && v <= hi) || ((ours === 'topK' || ours === 'maxTokens') && !Number.isInteger(v)))
      throw new WasteError('E_FORMAT', `${file}: "${key}" must be a number in ${lo}..${hi} (got ${excerpt(String(JSON.stringify(v)))})`);
    out[ours] = v;
  }
  if (doc.do_sample === false) {
    out.temperature = 0;
    delete out.topK;
    delete out.topP;
    delete out.minP;
  } else if (doc.do_sample !== undefined && doc.do_sample !== true) throw new WasteError('E_FORMAT', `${file}: "do_sample" must be true or false`);
  return out;
}


/**
 * The end-of-sequence ids generation_config.json lists (`eos_token_id`: one id or a list), which
 * HuggingFace's generate stops on beside config.json's: gpt-oss ends a tool call with `<|call|>`,
 * named only here; Qwen3 lists `<|endoftext|>` beside `<|im_end|>`. Empty when there is no file or
 * no key; a malformed value is an error naming the file.
 */
export function readGenerationEos(dir: string): number[] {
  checkModelLinks(dir);
  const file = path.join(dir, 'generation_config.json');
  if (!fs.existsSync(file)) return [];
  const doc = readJson(file);
  if (!isObject(doc)) throw new WasteError('E_FORMAT', `${file}: not a JSON object`);
  const v = doc.eos_token_id;
  if (v === undefined || v === null) return [];
  const list = Array.isArray(v) ? v : [v];
  if (list.length > 64 || !list.every((x) => typeof x === 'number' && Number.isInteger(x) && x >= 0 && x < 2 ** 31))
    throw new WasteError('E_FORMAT', `${file}: "eos_token_id" must be a token id or a list of at most 64 (got ${excerpt(String(JSON.stringify(v)))})`);
  return list as number[];
}
