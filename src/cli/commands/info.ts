import type { Command } from 'commander';
import { fmtName } from '../../container/format.js';
import { rowsCols, storedSizes } from '../../container/tensor.js';
import { architecture, openModelContainer } from '../../model/registry.js';
import type { KimiConfig } from '../../model/parts/kimi-config.js';
import { VERSION } from '../../version.js';
import { Arena } from '../../memory/arena.js';
import { openStreamFiles } from '../../experts/io.js';
import { formatSize } from '../../util/size.js';
import { modelOrDemo } from '../default-model.js';

export function registerInfo(program: Command): void {
  program
    .command('info')
    .description('describe a container: architecture, shapes, formats and sizes (loads no weights)')
    .argument('[model]', 'container directory or model name (default: the demo model that ships with waste)')
    .option('--json', 'print JSON', false)
    .action((model: string | undefined, opts: { json: boolean }) => {
      const info = describe(modelOrDemo(model));
      if (opts.json) process.stdout.write(JSON.stringify(info, null, 2) + '\n');
      else process.stdout.write(render(info));
    });
}

export function describe(dir: string) {
  const c = openModelContainer(dir);
  try {
    const arch = architecture(c.config.arch);
    // every architecture this build runs is of the Kimi family
    const cfg = c.config as KimiConfig;
    const prefix = c.manifest.tensorPrefix;
    let resident = 0;
    let embedding = 0;
    const trunkFormats = new Set<string>();
    for (const t of c.manifest.trunk) {
      if (prefix && !t.name.startsWith(prefix)) continue;
      const { rows, cols } = rowsCols(t.shape);
      const s = storedSizes(t.fmt, rows, cols, t.group);
      trunkFormats.add(fmtName(t.fmt));
      if (t.name === `${prefix}model.embed_tokens.weight`) embedding += s.payload + s.scaleBytes;
      else resident += s.payload + s.scaleBytes;
    }
    let expertBytes = 0;
    let recordBytes = 0;
    for (const b of c.banks.values()) {
      expertBytes += b.stride * b.experts;
      recordBytes = b.stride;
    }
    const params = arch.countParams(cfg);
    // Probe the page-cache bypass the way the engine does when it opens the banks.
    let io = { odirect: false, note: 'no expert banks' as string | undefined };
    if (c.manifest.sparse) io = { odirect: false, note: 'a sparse container (sizes only): nothing to read' };
    else if (c.banks.size) {
      const arena = new Arena(8192);
      const files = openStreamFiles(c, true, { arena, off: arena.alloc(8192, 4096) });
      io = { odirect: files.direct, note: files.note };
      files.close();
    }
    const kinds = cfg.layerKinds;
    const q = c.quant;
    return {
      engine: `waste ${VERSION}`,
      path: dir,
      arch: arch.id,
      architecture: cfg.archName,
      layers: cfg.layers,
      pattern: kinds.map((k) => (k.attn === 'kda' ? 'K' : 'M')).join(''),
      kdaLayers: kinds.filter((k) => k.attn === 'kda').length,
      mlaLayers: kinds.filter((k) => k.attn === 'mla').length,
      denseLayers: kinds.filter((k) => k.ffn === 'dense').length,
      moeLayers: kinds.filter((k) => k.ffn === 'moe').length,
      hidden: cfg.hidden,
      vocab: cfg.vocab,
      rmsNormEps: cfg.eps,
      kda: cfg.kda,
      mla: cfg.mla,
      denseIntermediate: cfg.denseInter,
      moe: cfg.moe,
      latentMoe: cfg.latent ?? null,
      attnResBlock: cfg.attnResBlock,
      activation: cfg.act,
      params: { total: params.total, activePerToken: params.active },
      formats: {
        experts: q
          ? { fmt: q.name, stages: q.stages, entries: q.entries, vecDim: q.vecDim, indexBlock: q.indexBlock, bitsPerWeight: (q.stages * q.indexBits) / q.vecDim }
          : null,
        trunk: [...trunkFormats].sort(),
      },
      io,
      bytes: {
        trunkFile: c.trunk.size,
        trunkResident: resident,
        embeddingOnDisk: embedding,
        experts: expertBytes,
        expertRecord: recordBytes,
        expertBanks: c.banks.size,
      },
    };
  } finally {
    c.close();
  }
}

function render(i: ReturnType<typeof describe>): string {
  const p = (n: number) => (n >= 1e12 ? `${(n / 1e12).toFixed(2)} T` : n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : `${n}`);
  const lines = [
    ['model', `${i.path} (${i.architecture})`],
    ['layers', `${i.layers}: ${i.kdaLayers} KDA + ${i.mlaLayers} MLA; ${i.denseLayers} dense + ${i.moeLayers} MoE`],
    ['pattern', i.pattern],
    ['hidden', `${i.hidden}, vocab ${i.vocab}, rms_norm_eps ${i.rmsNormEps}`],
  ];
  if (i.kdaLayers) lines.push(['KDA', `${i.kda.heads} heads × ${i.kda.headDim}, short conv ${i.kda.convKernel}`]);
  if (i.mlaLayers)
    lines.push(['MLA', `${i.mla.heads} heads, kv_lora ${i.mla.kvLoraRank}, qk ${i.mla.qkNope}+${i.mla.qkRope}, v ${i.mla.vHead} (no RoPE)`]);
  if (i.denseLayers) lines.push(['dense FFN', `${i.denseIntermediate}`]);
  if (i.moeLayers)
    lines.push([
      'MoE',
      `${i.moe.experts} experts, top-${i.moe.topK}, width ${i.moe.inter}${i.latentMoe ? ` on a latent of ${i.latentMoe.width}${i.latentMoe.norm ? ' (normed)' : ''}` : ''}, ${i.moe.shared} shared, routed scale ${i.moe.routedScale}${i.moe.renormalize ? ', renormalized' : ''}`,
    ]);
  const extras = [
    i.attnResBlock ? `attention residuals (blocks of ${i.attnResBlock})` : '',
    i.activation.kind === 'situ' ? `SiTU-GLU (β ${i.activation.beta}, linear β ${i.activation.linearBeta || 'none'})` : '',
    i.kdaLayers && i.kda.gateLowerBound !== undefined ? `KDA bounded gate (${i.kda.gateLowerBound})` : '',
    i.kdaLayers && i.kda.fullRankGate ? 'KDA full-rank output gate' : '',
    i.mlaLayers && i.mla.qLoraRank ? `MLA q_lora ${i.mla.qLoraRank}` : '',
    i.mlaLayers && i.mla.outputGate ? 'MLA output gate' : '',
  ].filter(Boolean);
  if (extras.length) lines.push(['features', extras.join(', ')]);
  lines.push(['params', `${p(i.params.total)} total, ${p(i.params.activePerToken)} active per token`]);
  const e = i.formats.experts;
  lines.push([
    'formats',
    `${e ? `experts ${e.fmt} (${e.stages} stages × ${e.entries} × ${e.vecDim}, ${e.bitsPerWeight.toFixed(2)} bits/weight), ` : ''}trunk ${i.formats.trunk.join('/')}`,
  ]);
  lines.push(['trunk', `${formatSize(i.bytes.trunkFile)}: ${formatSize(i.bytes.trunkResident)} resident, embedding ${formatSize(i.bytes.embeddingOnDisk)} stays on disk`]);
  if (i.bytes.expertBanks) {
    lines.push(['experts', `${formatSize(i.bytes.experts)} in ${i.bytes.expertBanks} banks, ${formatSize(i.bytes.expertRecord)} per expert`]);
    lines.push(['reads', i.io.odirect ? 'O_DIRECT: the page cache is bypassed' : `through the page cache (${i.io.note})`]);
  }
  return lines.map(([k, v]) => `${k.padEnd(10)} ${v}\n`).join('');
}
