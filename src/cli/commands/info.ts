import type { Command } from 'commander';
import { fmtName } from '../../container/format.js';
import { rowsCols, storedSizes } from '../../container/tensor.js';
import { visionOf } from '../../engine/assemble.js';
import { DEFAULT_CHUNK, arenaBytesFor } from '../../engine/plan.js';
import { cpuCount } from '../../kernels/wasm/pool.js';
import type { Architecture } from '../../model/architecture.js';
import { architecture, isCheckpointDir, openModelCheckpoint, openModelContainer } from '../../model/registry.js';
import type { ModelConfig } from '../../core/model-config.js';
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
      // the family's lines are the text form of its fields
      const { described: _, ...fields } = info;
      if (opts.json) process.stdout.write(JSON.stringify(fields, null, 2) + '\n');
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
      ...shapeOf(arch, c.config),
      vision: visionInfo(arch, dir, 'container', new ContainerSource(c), c.config),
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
      ...shapeOf(ck.arch, ck.config),
      vision: visionInfo(ck.arch, dir, 'checkpoint', ck.source, ck.config),
      formats: { checkpoint: [...dtypes].sort() },
      bytes: { stored, files: ck.st.files().size },
    };
  } finally {
    ck.close();
  }
}

/** What a model's config says of its shape, whatever holds its weights (the family describes its own parts). */
function shapeOf(arch: Architecture, cfg: ModelConfig) {
  const params = arch.countParams(cfg);
  const d = arch.describe(cfg);
  return {
    arch: arch.id,
    architecture: cfg.archName,
    layers: cfg.layers,
    hidden: cfg.hidden,
    vocab: cfg.vocab,
    rmsNormEps: cfg.eps,
    moe: cfg.moe,
    ...d.fields,
    params: { total: params.total, activePerToken: params.active },
    /** The family's own lines of the text form. */
    described: d.lines,
  };
}

/**
 * The vision tower as opening the model would find it (checked as then, reading no weight): its
 * shape, its parameters, the patches an image may become and the rows that makes, and the room it
 * takes loaded (what `waste plan` reserves); or why it is off.
 */
function visionInfo(arch: Architecture, dir: string, kind: 'container' | 'checkpoint', source: WeightSource, cfg: ModelConfig) {
  let off: string | undefined;
  const v = visionOf(arch, dir, { kind, source }, cfg, cpuCount(), DEFAULT_CHUNK, undefined, (m) => (off = m));
  if (!v) return off ? { off } : null;
  const d = arch.vision!.describe(v.spec);
  return { ...d, patch: v.spec.patch, maxPatches: v.spec.maxPatches, maxRows: Math.floor(v.spec.maxPatches / 4), loadedBytes: arenaBytesFor(v.bytes), mediaToken: v.spec.mediaToken };
}

function render(i: ReturnType<typeof describe>): string {
  const p = (n: number) => (n >= 1e12 ? `${(n / 1e12).toFixed(2)} T` : n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : n >= 1e6 ? `${(n / 1e6).toFixed(2)} M` : `${n}`);
  const lines: [string, string][] = [['model', `${i.path} (${i.architecture})`], ...i.described];
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
