import type { Command } from 'commander';
import { fmtName } from '../../container/format.js';
import { rowsCols, storedSizes } from '../../container/tensor.js';
import { visionOf } from '../../engine/assemble.js';
import { DEFAULT_CHUNK, arenaBytesFor } from '../../engine/plan.js';
import { cpuCount } from '../../kernels/wasm/pool.js';
import type { Architecture } from '../../model/architecture.js';
import { architecture, isCheckpointDir, openModelCheckpoint, openModelContainer } from '../../model/registry.js';
import type { KimiConfig } from '../../model/kimi/config.js';
import { ContainerSource } from '../../model/sources/container-source.js';
import type { WeightSource } from '../../model/sources/source.js';
import { VERSION } from '../../version.js';
import { Arena } from '../../memory/arena.js';
import { openStreamFiles } from '../../experts/io.js';
import { formatSize } from '../../util/size.js';
import { modelOrDemo } from '../default-model.js';

export function registerInfo(program: Command): void {
  program
    .command('info')
    .description('describe a model: architecture, shapes, vision tower, formats and sizes (loads no weights)')
    .argument('[model]', 'container directory, HuggingFace checkpoint folder or model name (default: the demo model that ships with waste)')
    .option('--json', 'print JSON', false)
    .action((model: string | undefined, opts: { json: boolean }) => {
      const info = describe(modelOrDemo(model));
      if (opts.json) process.stdout.write(JSON.stringify(info, null, 2) + '\n');
      else process.stdout.write(render(info));
    });
}

export function describe(dir: string) {
  return isCheckpointDir(dir) ? describeCheckpoint(dir) : describeContainer(dir);
}

function describeContainer(dir: string) {
  const c = openModelContainer(dir);
  try {
    const arch = architecture(c.config.arch);
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
    // Probe the page-cache bypass the way the engine does when it opens the banks.
    let io = { odirect: false, note: 'no expert banks' as string | undefined };
    if (c.manifest.sparse) io = { odirect: false, note: 'a sparse container (sizes only): nothing to read' };
    else if (c.banks.size) {
      const arena = new Arena(8192);
      const files = openStreamFiles(c, true, { arena, off: arena.alloc(8192, 4096) });
      io = { odirect: files.direct, note: files.note };
      files.close();
    }
    const q = c.quant;
    return {
      engine: `waste ${VERSION}`,
      path: dir,
      kind: 'container' as const,
      ...shapeOf(arch, c.config as KimiConfig),
      vision: visionInfo(arch, dir, 'container', new ContainerSource(c), c.config as KimiConfig),
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

/** A HuggingFace checkpoint folder, as `run` and `serve` open it: every weight in f32, experts in the trunk, nothing streamed. */
function describeCheckpoint(dir: string) {
  const ck = openModelCheckpoint(dir);
  try {
    const dtypes = new Set<string>();
    let stored = 0;
    for (const name of ck.st.names()) {
      const t = ck.st.info(name);
      dtypes.add(t.dtype);
      stored += t.bytes;
    }
    return {
      engine: `waste ${VERSION}`,
      path: dir,
      kind: 'checkpoint' as const,
      ...shapeOf(ck.arch, ck.config as KimiConfig),
      vision: visionInfo(ck.arch, dir, 'checkpoint', ck.source, ck.config as KimiConfig),
      formats: { checkpoint: [...dtypes].sort() },
      bytes: { stored, files: ck.st.files().size },
    };
  } finally {
    ck.close();
  }
}

/** What a model's config says of its shape, whatever holds its weights. */
function shapeOf(arch: Architecture, cfg: KimiConfig) {
  // every architecture this build runs is of the Kimi family
  const kinds = cfg.layerKinds;
  const params = arch.countParams(cfg);
  return {
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
  };
}

/**
 * The vision tower as opening the model would find it (checked as then, reading no weight): its
 * shape, its parameters, the patches an image may become and the rows that makes, and the room it
 * takes loaded (what `waste plan` reserves); or why it is off.
 */
function visionInfo(arch: Architecture, dir: string, kind: 'container' | 'checkpoint', source: WeightSource, cfg: KimiConfig) {
  let off: string | undefined;
  const v = visionOf(arch, dir, { kind, source }, cfg, cpuCount(), DEFAULT_CHUNK, undefined, (m) => (off = m));
  if (!v) return off ? { off } : null;
  const d = arch.vision!.describe(v.spec);
  return { ...d, patch: v.spec.patch, maxPatches: v.spec.maxPatches, maxRows: Math.floor(v.spec.maxPatches / 4), loadedBytes: arenaBytesFor(v.bytes), mediaToken: v.spec.mediaToken };
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
  lines.push(['params', `${p(i.params.total)} total, ${p(i.params.activePerToken)} active per token${i.vision && 'parameters' in i.vision ? `, and ${p(i.vision.parameters)} in the vision tower` : ''}`]);
  const v = i.vision;
  if (v && 'parameters' in v)
    lines.push([
      'vision',
      `${v.layers} layers × ${v.hidden} wide, ${v.heads} heads; patches of ${v.patch} px, up to ${v.maxPatches} an image (${v.maxRows} rows of the prompt); ${formatSize(v.loadedBytes)} loaded, by the first image`,
    ]);
  else if (v) lines.push(['vision', `off: ${v.off}`]);
  if (i.kind === 'checkpoint') {
    lines.push(['formats', `a HuggingFace checkpoint (${i.formats.checkpoint.join('/')}), run as the unquantized reference: every weight in f32, the experts too (waste plan shows the memory)`]);
    lines.push(['weights', `${formatSize(i.bytes.stored)} in ${i.bytes.files} safetensors file${i.bytes.files === 1 ? '' : 's'}`]);
    return lines.map(([k, w]) => `${k.padEnd(10)} ${w}\n`).join('');
  }
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
  return lines.map(([k, w]) => `${k.padEnd(10)} ${w}\n`).join('');
}
