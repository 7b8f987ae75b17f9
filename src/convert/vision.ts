import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeFileAtomic } from '../util/write-atomic.js';
import { WasteError } from '../util/errors.js';
import { type JsonObject, isObject } from '../util/fields.js';
import { readBytes, readJson } from '../util/read.js';

/** What the engine reads of an image: at most this many 14-pixel patches (the C engine's cost cap). */
const MAX_PATCHES = 1024;
/** The tower's RMSNorm epsilon: `nn.RMSNorm(dim)` without one takes f32's machine epsilon. */
const VT_RMS_EPS = 1.1920928955078125e-7;

/**
 * A multimodal checkpoint's vision side for the container: `vision.json` (the tower's shape from
 * `vision_config`, the image preprocessing from `preprocessor_config.json`'s `media_proc_cfg`, the
 * media placeholder id), as the C engine's converter writes it, and `preprocessor_config.json`
 * itself. Returns the names written (none for a text-only model).
 */
export function visionFiles(src: string, out: string, raw: JsonObject): string[] {
  const vc = raw.vision_config;
  if (!isObject(vc)) return [];
  const written: string[] = [];
  const vision: JsonObject = {};
  for (const [k, v] of Object.entries(vc)) if (!k.startsWith('_')) vision[k] = v;
  vision.vt_rms_eps = VT_RMS_EPS;
  if (typeof raw.media_placeholder_token_id === 'number') vision.media_placeholder_token_id = raw.media_placeholder_token_id;
  vision.max_patches = MAX_PATCHES;
  const pre = path.join(src, 'preprocessor_config.json');
  if (fs.existsSync(pre)) {
    const doc = readJson(pre);
    const media = isObject(doc) ? (isObject(doc.media_proc_cfg) ? doc.media_proc_cfg : doc) : undefined;
    if (!media) throw new WasteError('E_FORMAT', `${pre}: not a JSON object`);
    for (const k of ['image_mean', 'image_std', 'patch_size', 'in_patch_limit', 'patch_limit_on_one_side'])
      if (media[k] !== undefined) vision[k] = media[k];
    writeFileAtomic(path.join(out, 'preprocessor_config.json'), readBytes(pre));
    written.push('preprocessor_config.json');
  }
  writeFileAtomic(path.join(out, 'vision.json'), JSON.stringify(vision, null, 1) + '\n');
  written.push('vision.json');
  return written;
}
