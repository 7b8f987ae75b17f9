import type { DeepseekConfig } from './config.js';

/** What `waste info` says of a DeepSeek-V3 config: MLA, RoPE, the dense and MoE layers. */
export function describeDeepseek(cfg: DeepseekConfig): { fields: Record<string, unknown>; lines: [string, string][] } {
  const m = cfg.mla;
  const dense = cfg.layerKinds.filter((k) => k.ffn === 'dense').length;
  const moeLayers = cfg.layers - dense;
  const r = cfg.router;
  const s = cfg.rope.scaling;
  const fields = { mla: m, rope: cfg.rope, softmaxScale: cfg.scale, denseLayers: dense, moeLayers, denseIntermediate: cfg.denseInter, sharedIntermediate: cfg.sharedInter, router: r, mtpLayers: cfg.skippedLayers, tiedEmbeddings: cfg.tieEmbeddings };
  const lines: [string, string][] = [
    ['layers', `${cfg.layers}: MLA; ${dense} dense + ${moeLayers} MoE${cfg.skippedLayers ? `; ${cfg.skippedLayers} MTP layer${cfg.skippedLayers > 1 ? 's' : ''} not run` : ''}`],
    ['hidden', `${cfg.hidden}, vocab ${cfg.vocab}, rms_norm_eps ${cfg.eps}${cfg.tieEmbeddings ? ', head tied to the embedding' : ''}`],
    ['MLA', `${m.heads} heads, ${m.qLoraRank ? `q_lora ${m.qLoraRank}` : 'q_proj'}, kv_lora ${m.kvLoraRank}, qk ${m.qkNope}+${m.qkRope}, v ${m.vHead}, softmax scale ${cfg.scale.toPrecision(6)}`],
    [
      'rope',
      `θ ${cfg.rope.theta} on ${cfg.rope.dims} dims${cfg.rope.pairs === 'interleaved' ? ' (interleaved)' : ''}${s.type === 'default' ? '' : `, ${s.type} ×${s.factor}`}${s.type === 'yarn' ? ` (β ${s.betaFast}/${s.betaSlow}, original ${s.originalMax})` : ''}`,
    ],
  ];
  if (dense) lines.push(['dense FFN', `${cfg.denseInter}`]);
  if (moeLayers)
    lines.push([
      'MoE',
      `${cfg.moe.experts} experts, top-${cfg.moe.topK}, width ${cfg.moe.inter}, sigmoid + correction bias${r.groups && r.groups.count > 1 ? `, ${r.groups.keep} of ${r.groups.count} groups` : ''}${r.renormalize ? ', renormalized' : ''}, scale ${r.scale}${cfg.sharedInter ? `, shared ${cfg.sharedInter}` : ''}`,
    ]);
  return { fields, lines };
}
