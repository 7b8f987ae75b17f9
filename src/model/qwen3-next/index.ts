import type { Architecture } from '../architecture.js';
import { loadTrunk, planTrunk } from '../base/binder.js';
import { WasteError, unsupported } from '../../util/errors.js';
import type { WeightSource } from '../sources/source.js';
import { countTransformerParams, transformerWidest } from '../transformer/config.js';
import { describeTransformer } from '../transformer/describe.js';
import { gdnChannels, gdnProjWidths } from '../blocks/gated-deltanet.js';
import { type Qwen3NextConfig, QWEN3_NEXT_TYPES, parseQwen3NextConfig } from './config.js';
import { QWEN3_NEXT_LAYOUT } from './layout.js';
import { QWEN3_NEXT_NAMES, qwen3NextExpertLayerOf } from './names.js';
import { Qwen3NextNetwork } from './network.js';
import { QWEN3_NEXT_RELEASES } from './releases.js';
import { Qwen3NextScratch } from './scratch.js';
import { Qwen3NextState } from './state.js';
import { qwen3NextSynth } from './synth.js';

/** Parameters: the transformer's count with the DeltaNet layers' mixers, the gated q_proj and the shared expert's gate. */
function countParams(cfg: Qwen3NextConfig): { total: number; active: number } {
  const base = countTransformerParams(cfg);
  const H = cfg.hidden;
  const a = cfg.attention;
  const g = cfg.gdn;
  const attn = H * a.heads * a.headDim * 2 + H * a.kvHeads * a.headDim * 2;
  const gdn = gdnProjWidths(g).reduce((s, w) => s + w * H, 0) + gdnChannels(g) * g.convKernel + 2 * g.vHeads + g.headDim + H * g.vHeads * g.headDim;
  let extra = 0;
  for (const k of cfg.layerKinds) extra += (k.attn === 'gdn' ? gdn - attn : H * a.heads * a.headDim) + (k.ffn === 'moe' ? H : 0);
  return { total: base.total + extra, active: base.active + extra };
}

function describe(cfg: Qwen3NextConfig) {
  const d = describeTransformer(cfg);
  const g = cfg.gdn;
  const n = cfg.layerKinds.filter((k) => k.attn === 'gdn').length;
  d.lines[0] = ['layers', `${cfg.layers}: ${n} Gated DeltaNet + ${cfg.layers - n} gated attention; ${d.lines[0][1].split('; ').slice(1).join('; ')}`];
  d.lines.splice(3, 0, ['deltanet', `${g.kHeads} key heads, ${g.vHeads} value heads × ${g.headDim}, conv ${g.convKernel}, ${g.packing === 'grouped' ? 'in_proj_qkvz/ba' : 'in_proj_qkv/z/b/a'}`]);
  const i = d.lines.findIndex((l) => l[0] === 'MoE');
  if (i >= 0) d.lines[i][1] += ' (σ-gated)';
  if (cfg.unrunTower) d.lines.push(['vision', "the release's tower is not run: text in, text out"]);
  return { fields: { ...d.fields, deltaNet: { ...g, layers: n }, family: cfg.family }, lines: d.lines };
}

/**
 * Stacked experts outside Qwen3.5's release layout (which the checkpoint reader unstacks): this
 * build binds `model.layers.N.mlp.experts.E.*`, and says so by name.
 */
function refuseReleaseLayout(src: WeightSource, cfg: Qwen3NextConfig): void {
  const L = cfg.layerKinds.findIndex((k) => k.ffn === 'moe');
  if (L >= 0 && !src.has(`model.layers.${L}.mlp.experts.0.gate_proj.weight`) && (src.has(`model.layers.${L}.mlp.experts.gate_up_proj`) || src.has(`model.layers.${L}.mlp.experts.gate_up_proj.weight`)))
    throw unsupported(`${src.label}: stacked experts (model.layers.${L}.mlp.experts.gate_up_proj) outside Qwen3.5's release layout are not read by this build; it reads one tensor per expert matrix (mlp.experts.N.gate_proj…), or a release's model.language_model. layout`);
}

/** Qwen3-Next (`qwen3_next`: Qwen3-Next-80B-A3B) and Qwen3.5 MoE's language model (`qwen3_5_moe`, `qwen3_5_moe_text`). */
export const qwen3Next: Architecture<Qwen3NextConfig> = {
  id: 'qwen3-next',
  claims: (cfg) => cfg.given('model_type') && (QWEN3_NEXT_TYPES as readonly string[]).includes(String(cfg.raw('model_type'))),
  parseConfig: parseQwen3NextConfig,
  countParams,
  planWeights(src, cfg, q) {
    refuseReleaseLayout(src, cfg);
    return planTrunk(src, cfg, q, QWEN3_NEXT_LAYOUT);
  },
  stateBytes: (cfg, maxContext) => Qwen3NextState.layerBytes(cfg, maxContext),
  scratchBytes: (cfg, chunk, maxContext, q, role) => Qwen3NextScratch.bytes(cfg, maxContext, chunk, q, role),
  widestInput: (cfg) => Math.max(transformerWidest(cfg), cfg.gdn.vHeads * cfg.gdn.headDim),
  build(p) {
    if (p.cfg.arch !== 'qwen3-next') throw new WasteError('E_STATE', `a ${p.cfg.arch} config given to the qwen3-next architecture`);
    const w = loadTrunk(p.source, p.cfg, p.of, p.arenas, p.quant, QWEN3_NEXT_LAYOUT, p.onProgress);
    return new Qwen3NextNetwork(p.cfg, w, p.kernels, p.experts, p.quant, p.record, p.chunk, p.maxContext);
  },
  expertTensor: (layer, e, kind) => QWEN3_NEXT_NAMES.expert(layer, e, kind),
  expertLayerOf: qwen3NextExpertLayerOf,
  // the MTP layer and (Qwen3.5) the vision tower: neither converted nor copied aside by a pull
  unread: (name) => name.startsWith('mtp.') || name.startsWith('model.visual.'),
  describe,
  visionRefusal: "qwen3-next runs no vision tower (Qwen3.5's releases have one; this build runs their language model only)",
  synth: qwen3NextSynth,
  releases: QWEN3_NEXT_RELEASES,
};
