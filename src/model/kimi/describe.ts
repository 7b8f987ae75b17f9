import type { KimiConfig } from './config.js';

/** What `waste info` says of a Kimi config: its layer pattern, KDA, MLA, MoE and K3's features. */
export function describeKimi(cfg: KimiConfig): { fields: Record<string, unknown>; lines: [string, string][] } {
  const kinds = cfg.layerKinds;
  const f = {
    pattern: kinds.map((k) => (k.attn === 'kda' ? 'K' : 'M')).join(''),
    kdaLayers: kinds.filter((k) => k.attn === 'kda').length,
    mlaLayers: kinds.filter((k) => k.attn === 'mla').length,
    denseLayers: kinds.filter((k) => k.ffn === 'dense').length,
    moeLayers: kinds.filter((k) => k.ffn === 'moe').length,
    kda: cfg.kda,
    mla: cfg.mla,
    denseIntermediate: cfg.denseInter,
    latentMoe: cfg.latent ?? null,
    attnResBlock: cfg.attnResBlock,
    activation: cfg.act,
  };
  const lines: [string, string][] = [
    ['layers', `${cfg.layers}: ${f.kdaLayers} KDA + ${f.mlaLayers} MLA; ${f.denseLayers} dense + ${f.moeLayers} MoE`],
    ['pattern', f.pattern],
    ['hidden', `${cfg.hidden}, vocab ${cfg.vocab}, rms_norm_eps ${cfg.eps}`],
  ];
  if (f.kdaLayers) lines.push(['KDA', `${cfg.kda.heads} heads × ${cfg.kda.headDim}, short conv ${cfg.kda.convKernel}`]);
  if (f.mlaLayers) lines.push(['MLA', `${cfg.mla.heads} heads, kv_lora ${cfg.mla.kvLoraRank}, qk ${cfg.mla.qkNope}+${cfg.mla.qkRope}, v ${cfg.mla.vHead} (no RoPE)`]);
  if (f.denseLayers) lines.push(['dense FFN', `${cfg.denseInter}`]);
  if (f.moeLayers) {
    const m = cfg.moe;
    const lat = cfg.latent;
    lines.push(['MoE', `${m.experts} experts, top-${m.topK}, width ${m.inter}${lat ? ` on a latent of ${lat.width}${lat.norm ? ' (normed)' : ''}` : ''}, ${m.shared} shared, routed scale ${m.routedScale}${m.renormalize ? ', renormalized' : ''}`]);
  }
  const extras = [
    cfg.attnResBlock ? `attention residuals (blocks of ${cfg.attnResBlock})` : '',
    cfg.act.kind === 'situ' ? `SiTU-GLU (β ${cfg.act.beta}, linear β ${cfg.act.linearBeta || 'none'})` : '',
    f.kdaLayers && cfg.kda.gateLowerBound !== undefined ? `KDA bounded gate (${cfg.kda.gateLowerBound})` : '',
    f.kdaLayers && cfg.kda.fullRankGate ? 'KDA full-rank output gate' : '',
    f.mlaLayers && cfg.mla.qLoraRank ? `MLA q_lora ${cfg.mla.qLoraRank}` : '',
    f.mlaLayers && cfg.mla.outputGate ? 'MLA output gate' : '',
  ].filter(Boolean);
  if (extras.length) lines.push(['features', extras.join(', ')]);
  return { fields: f, lines };
}
