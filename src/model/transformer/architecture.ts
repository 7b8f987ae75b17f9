import type { StackedExperts } from '../../checkpoint/stacked.js';
import { WasteError } from '../../util/errors.js';
import type { Fields } from '../../util/fields.js';
import type { Architecture } from '../architecture.js';
import { loadTrunk, planTrunk } from '../base/binder.js';
import type { KnownRelease } from '../release.js';
import type { FamilySynth } from '../synth.js';
import { type TransformerConfig, countTransformerParams, transformerWidest } from './config.js';
import { describeTransformer } from './describe.js';
import { type MoeNames, transformerLayout } from './layout.js';
import { TransformerNetwork } from './network.js';
import { TransformerScratch } from './scratch.js';
import { KvState } from './state.js';

/** What a transformer family folder gives: its id, the model types it runs, its config parser, its tensor names, its synthetic shapes and releases. */
export interface TransformerFamily {
  id: string;
  /** HF `model_type`s it runs. */
  modelTypes: readonly string[];
  parseConfig(cfg: Fields): TransformerConfig;
  moe: MoeNames;
  /** The layer whose routed experts a checkpoint tensor holds (undefined: a trunk tensor). */
  expertLayerOf(name: string): number | undefined;
  synth: FamilySynth<TransformerConfig>;
  releases?: readonly KnownRelease[];
  /** Where a release stacks each layer's routed experts (gpt-oss); absent: one tensor per expert and kind. */
  stacked?: StackedExperts;
}

/** A transformer family as the engine sees it: the shared decoder with the family's details. */
export function transformerArchitecture(f: TransformerFamily): Architecture<TransformerConfig> {
  const layout = transformerLayout(f.moe);
  return {
    id: f.id,
    claims: (cfg) => cfg.given('model_type') && f.modelTypes.includes(String(cfg.raw('model_type'))),
    parseConfig: f.parseConfig,
    countParams: countTransformerParams,
    planWeights: (src, cfg, q) => planTrunk(src, cfg, q, layout),
    stateBytes: (cfg, maxContext) => KvState.layerBytes(cfg, maxContext),
    scratchBytes: (cfg, chunk, maxContext, q, role) => TransformerScratch.bytes(cfg, maxContext, chunk, q, role),
    widestInput: transformerWidest,
    build(p) {
      if (p.cfg.arch !== f.id) throw new WasteError('E_STATE', `a ${p.cfg.arch} config given to the ${f.id} architecture`);
      const w = loadTrunk(p.source, p.cfg, p.of, p.arenas, p.quant, layout, p.onProgress);
      return new TransformerNetwork(p.cfg, w, p.kernels, p.experts, p.quant, p.record, p.chunk, p.maxContext);
    },
    expertTensor: (layer, e, kind) => f.moe.expert(layer, e, kind),
    expertLayerOf: f.expertLayerOf,
    stackedExperts: f.stacked,
    unread: (name, cfg) => {
      // model.layers.N past num_hidden_layers: the MTP layers (skippedLayers of them)
      const m = cfg.skippedLayers ? /(?:^|\.)layers\.(\d+)\./.exec(name) : null;
      return !!m && Number(m[1]) >= cfg.layers && Number(m[1]) < cfg.layers + cfg.skippedLayers;
    },
    describe: describeTransformer,
    synth: f.synth,
    releases: f.releases,
  };
}
