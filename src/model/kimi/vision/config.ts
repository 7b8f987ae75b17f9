import * as fs from 'node:fs';
import * as path from 'node:path';
import { WasteError } from '../../../util/errors.js';
import { Fields, isObject } from '../../../util/fields.js';
import { readJson } from '../../../util/read.js';
import type { VisionSpec } from '../../architecture.js';

/** The vision tower's shape and the image preprocessing it was trained with, bounded. */
export interface VisionConfig extends VisionSpec {
  /** vt_hidden_size: the tower's width D. */
  hidden: number;
  heads: number;
  /** qkv_hidden_size = heads · headDim. */
  qkv: number;
  headDim: number;
  /** vt_intermediate_size: the MLP's width. */
  inter: number;
  layers: number;
  /** The stored position grid: init_pos_emb_height × init_pos_emb_width. */
  posH: number;
  posW: number;
  /** The projector's output: the language model's width. */
  textHidden: number;
  /** Pixels per patch side. */
  patch: number;
  /** The tower's RMSNorm ε (f32's machine epsilon in the release) and the projector's. */
  eps: number;
  projEps: number;
  /** `<|media_pad|>`: each one in a prompt stands for one image's rows. */
  mediaToken: number;
  /** The engine's image budget in patches (the C engine's cost cap, 1024 for K3). */
  maxPatches: number;
  mean: [number, number, number];
  std: [number, number, number];
  /** The release processor's own cap on patches, and on patches along one side. */
  inPatchLimit: number;
  sideLimit: number;
  towerLimit: number;
}

/** The most patches one image may have: the attention kernel's score row has room for this many. */
export const MAX_IMAGE_PATCHES = 16384;

/** The keys whose values this build implements; any other value is refused by name. */
const FIXED: [string, unknown][] = [
  ['pos_emb_interpolation_mode', 'bilinear'],
  ['norm_type', 'rmsnorm'],
  ['activation_func', 'gelu_pytorch_tanh'],
  ['projector_hidden_act', 'gelu'],
  ['attn_bias', false],
  ['linear_bias', false],
  ['patch_embed_proj_bias', false],
  ['mlp_type', 'mlp2'],
  ['merge_type', 'sd2_tpool'],
  ['mm_projector_type', 'patchmergerv2'],
  ['pos_emb_type', 'divided_fixed'],
];

/**
 * The vision side of a model directory, or undefined when it has none: a container's
 * `vision.json` (the tower's `vision_config` keys plus the engine's image budget and the
 * preprocessing, as the converter writes it), or a checkpoint's `vision_config` in `config.json`
 * with its `preprocessor_config.json`.
 */
export function readVisionConfig(dir: string, kind: 'container' | 'checkpoint'): VisionConfig | undefined {
  if (kind === 'container') {
    const file = path.join(dir, 'vision.json');
    if (!fs.existsSync(file)) return undefined;
    return parseVisionConfig(Fields.root('vision.json', readJson(file)), undefined);
  }
  const raw = readJson(path.join(dir, 'config.json'));
  if (!isObject(raw) || !isObject(raw.vision_config)) return undefined;
  const outer = Fields.root('config.json', raw);
  const pre = path.join(dir, 'preprocessor_config.json');
  let media: Fields | undefined;
  if (fs.existsSync(pre)) {
    const doc = Fields.root('preprocessor_config.json', readJson(pre));
    media = doc.optionalObject('media_proc_cfg') ?? doc;
  }
  const vc = outer.object('vision_config');
  return parseVisionConfig(vc, { media, mediaToken: outer.int('media_placeholder_token_id', 0, 1 << 24) });
}

/** Bound every field; `from` carries a checkpoint's placeholder id and preprocessing (a container's vision.json has both). */
export function parseVisionConfig(f: Fields, from: { media?: Fields; mediaToken: number } | undefined): VisionConfig {
  for (const [k, want] of FIXED)
    if (f.given(k) && f.raw(k) !== want) throw f.fail(k, `must be ${JSON.stringify(want)} (the only form this build computes)`, f.raw(k));
  if (f.given('merge_kernel_size')) {
    const m = f.intList('merge_kernel_size', 1, 64, 2);
    if (!m || m.length !== 2 || m[0] !== 2 || m[1] !== 2) throw f.fail('merge_kernel_size', 'must be [2, 2] (the only merge this build computes)');
  }
  const hidden = f.int('vt_hidden_size', 1, 16384);
  const heads = f.int('vt_num_attention_heads', 1, 256);
  const qkv = f.int('qkv_hidden_size', 1, 65536, hidden);
  if (qkv % heads !== 0) throw f.fail('qkv_hidden_size', `must be a multiple of vt_num_attention_heads (${heads})`, qkv);
  const headDim = qkv / heads;
  // the 2-D rotary table pairs adjacent values, half of them per axis
  if (headDim % 4 !== 0) throw f.fail('qkv_hidden_size', `gives a head width of ${headDim}; the 2-D rotary embedding needs a multiple of 4`);
  if (f.given('mm_hidden_size') && f.raw('mm_hidden_size') !== hidden) throw f.fail('mm_hidden_size', `must equal vt_hidden_size (${hidden})`, f.raw('mm_hidden_size'));
  const media = from?.media ?? f;
  const triple = (key: string): [number, number, number] => {
    if (!media.given(key)) return [0.5, 0.5, 0.5];
    const v = media.raw(key);
    // bounded so that (v / 255 − mean) / std stays an ordinary f32
    if (!Array.isArray(v) || v.length !== 3 || !v.every((x) => typeof x === 'number' && Math.abs(x) <= 1000))
      throw media.fail(key, 'must be a list of three numbers in [-1000, 1000]', v);
    return [v[0] as number, v[1] as number, v[2] as number];
  };
  const std = triple('image_std');
  if (std.some((s) => !(s >= 1e-3))) throw media.fail('image_std', 'must be at least 0.001');
  const patch = media.int('patch_size', 1, 64, f.int('patch_size', 1, 64, 14));
  if (f.given('patch_size') && f.raw('patch_size') !== patch) throw f.fail('patch_size', `disagrees with the preprocessing's ${patch}`, f.raw('patch_size'));
  return {
    hidden,
    heads,
    qkv,
    headDim,
    inter: f.int('vt_intermediate_size', 1, 1 << 18),
    layers: f.int('vt_num_hidden_layers', 1, 256),
    posH: f.int('init_pos_emb_height', 1, 1024),
    posW: f.int('init_pos_emb_width', 1, 1024),
    textHidden: f.int('text_hidden_size', 1, 65536),
    patch,
    eps: f.num('vt_rms_eps', 0, 0.5, 1.1920928955078125e-7, true),
    projEps: f.num('projector_ln_eps', 0, 0.5, 1e-5, true),
    mediaToken: from ? from.mediaToken : f.int('media_placeholder_token_id', 0, 1 << 24),
    maxPatches: f.int('max_patches', 4, MAX_IMAGE_PATCHES, 1024),
    mean: triple('image_mean'),
    std,
    inPatchLimit: media.int('in_patch_limit', 4, 1 << 24, 65536),
    sideLimit: media.int('patch_limit_on_one_side', 2, 1 << 16, 512),
    towerLimit: MAX_IMAGE_PATCHES,
  };
}

/** A vision config whose text width is not the language model's cannot feed it. */
export function checkVisionFits(v: VisionConfig, hidden: number, vocab: number): void {
  if (v.textHidden !== hidden) throw new WasteError('E_FORMAT', `vision.json: text_hidden_size ${v.textHidden} is not the language model's hidden_size ${hidden}`);
  if (v.mediaToken >= vocab) throw new WasteError('E_FORMAT', `vision.json: media_placeholder_token_id ${v.mediaToken} is outside the vocabulary (0..${vocab - 1})`);
}
