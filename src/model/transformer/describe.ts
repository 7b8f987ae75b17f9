import type { TransformerConfig } from './config.js';

/** What `waste info` says of a transformer config: attention, windows, rotary, FFN and MoE. */
export function describeTransformer(cfg: TransformerConfig): { fields: Record<string, unknown>; lines: [string, string][] } {
  const a = cfg.attention;
  const dense = cfg.layerKinds.filter((k) => k.ffn === 'dense').length;
  const moeLayers = cfg.layers - dense;
  const windowed = cfg.windows.filter((w) => w > 0).length;
  const fields = {
    attention: { heads: a.heads, kvHeads: a.kvHeads, headDim: a.headDim, qkNorm: a.qkNorm, bias: cfg.bias, sinks: cfg.sinks, clip: a.clip || null },
    windows: windowed ? cfg.windows : null,
    rope: cfg.rope,
    denseLayers: dense,
    moeLayers,
    denseIntermediate: cfg.denseInter,
    sharedIntermediate: cfg.sharedInter,
    router: cfg.router,
    tiedEmbeddings: cfg.tieEmbeddings,
  };
  const r = cfg.router;
  const s = cfg.rope.scaling;
  const lines: [string, string][] = [
    ['layers', `${cfg.layers}: attention; ${dense} dense + ${moeLayers} MoE${windowed ? `; ${windowed} with a sliding window of ${Math.max(...cfg.windows)}` : ''}`],
    ['hidden', `${cfg.hidden}, vocab ${cfg.vocab}, rms_norm_eps ${cfg.eps}${cfg.tieEmbeddings ? ', head tied to the embedding' : ''}`],
    [
      'attention',
      `${a.heads} heads × ${a.headDim}, ${a.kvHeads} kv heads${a.qkNorm !== 'none' ? `, q/k norm ${a.qkNorm === 'head' ? 'per head' : 'over the projection'}` : ''}${cfg.bias.qkv ? ', qkv bias' : ''}${cfg.bias.o ? ', o bias' : ''}${cfg.sinks ? ', sinks' : ''}${a.clip ? `, clip ${a.clip}` : ''}`,
    ],
    ['rope', `θ ${cfg.rope.theta}, ${cfg.rope.dims} of ${a.headDim} dims${cfg.rope.pairs === 'interleaved' ? ' (interleaved)' : ''}${s.type === 'default' ? '' : `, ${s.type} ×${s.factor}`}`],
  ];
  if (dense) lines.push(['dense FFN', `${cfg.denseInter}`]);
  if (moeLayers)
    lines.push([
      'MoE',
      `${cfg.moe.experts} experts, top-${cfg.moe.topK}, width ${cfg.moe.inter}, ${r.scoring === 'sigmoid' ? `sigmoid${r.groups && r.groups.count > 1 ? `, ${r.groups.keep} of ${r.groups.count} groups` : ''}` : r.scoring === 'softmax' ? 'softmax' : 'softmax of the top k'}${r.renormalize ? ', renormalized' : ''}${r.scale !== 1 ? `, scale ${r.scale}` : ''}${cfg.sharedInter ? `, shared ${cfg.sharedInter}` : ''}${cfg.expertBias ? ', expert biases' : ''}`,
    ]);
  // multi-token-prediction layers (GLM-4.5's): in the checkpoint, never read
  if (cfg.skippedLayers) {
    Object.assign(fields, { mtpLayers: cfg.skippedLayers });
    lines.push(['MTP', `${cfg.skippedLayers} layer${cfg.skippedLayers > 1 ? 's' : ''} after the last (multi-token prediction): neither run nor converted`]);
  }
  return { fields, lines };
}
