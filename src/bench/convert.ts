import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { convert } from '../convert/convert.js';
import { cpuCount } from '../kernels/wasm/pool.js';
import { architectureOf } from '../model/registry.js';
import { writeSyntheticCheckpoint } from '../synth/checkpoint.js';
import { synthConfig } from '../synth/synth.js';
import { Fields } from '../util/fields.js';
import { table } from './measure.js';

export interface ConvertBenchRow {
  threads: number;
  /** Trunk: source MB per second (single-threaded JavaScript whatever the thread count). */
  trunkMBps: number;
  /** One MoE layer's codebook training, in seconds (it does not grow with the expert count). */
  trainSeconds: number;
  /** Encoding: seconds per expert (three 1024 × 2304 matrices, 14.2 MB of bf16). */
  secondsPerExpert: number;
  /** Expert encoding throughput in source MB/s, and per thread. */
  expertMBps: number;
  expertMBpsPerCore: number;
  /** The full model on `projectCores` cores at this per-core rate, in hours. */
  projectedHours: number;
}

export interface ConvertBenchResult {
  shape: 'kimi-linear' | 'k3';
  checkpoint: string;
  experts: number;
  projectCores: number;
  /** The full model's source: routed experts (bf16 for Kimi-Linear, MXFP4 for K3) and the rest (bf16), in bytes. */
  klExpertBytes: number;
  klTrunkBytes: number;
  rows: ConvertBenchRow[];
}

/**
 * Conversion throughput on real Kimi-Linear shapes: a synthetic bf16 checkpoint with one dense and
 * one MoE layer (hidden 2304, experts of width 1024) is converted with 1 and N threads. The trunk,
 * a layer's codebook training and each expert's encoding are timed apart from the progress
 * reports, then projected onto the whole 48B model (26 MoE layers × 256 experts).
 */
export async function benchConvert(opts: { shape?: 'kimi-linear' | 'k3'; experts?: number; threads?: number[]; projectCores?: number; log?: (s: string) => void } = {}): Promise<ConvertBenchResult> {
  const log = opts.log ?? (() => {});
  const shape = opts.shape ?? 'kimi-linear';
  const experts = opts.experts ?? (shape === 'k3' ? 6 : 16);
  const projectCores = opts.projectCores ?? 8;
  const threadCounts = opts.threads ?? [...new Set([1, Math.max(2, cpuCount())])];
  const dir = path.join(os.tmpdir(), `waste-bench-hf-${shape}-E${experts}`);
  if (!fs.existsSync(path.join(dir, 'config.json'))) {
    log(`writing a synthetic ${shape} checkpoint (2 layers, ${experts} experts) to ${dir}…`);
    writeSyntheticCheckpoint(dir, { shape, layers: 2, experts, seed: 1, shards: 2, force: true, config: { vocab_size: 16384 } });
  }

  const flat = synthConfig({ shape });
  const arch = architectureOf(Fields.root(shape, flat));
  const full = arch.parseConfig(Fields.root(shape, flat));
  const moeLayers = full.layerKinds.filter((k) => k.ffn === 'moe').length;
  const weightsPerExpert = 3 * full.expertWidth * full.moe.inter;
  // experts released packed as MXFP4 (K3's): half a byte a weight and a scale byte per 32
  const perExpert = arch.synth!.checkpoint(flat, {}).experts === 'mxfp4-packed' ? weightsPerExpert / 2 + weightsPerExpert / 32 : weightsPerExpert * 2;
  const klExpertBytes = moeLayers * full.moe.experts * perExpert;
  const klTrunkBytes = (arch.countParams(full).total - moeLayers * full.moe.experts * weightsPerExpert) * 2;

  const rows: ConvertBenchRow[] = [];
  for (const threads of threadCounts) {
    const out = fs.mkdtempSync(path.join(os.tmpdir(), 'waste-bench-convert-'));
    const marks: { t: number; done: number; what: string }[] = [];
    try {
      log(`converting with ${threads} thread${threads === 1 ? '' : 's'}…`);
      await convert(dir, path.join(out, 'model'), { threads, onProgress: (done, _total, what) => marks.push({ t: performance.now(), done, what }) });
    } finally {
      fs.rmSync(out, { recursive: true, force: true });
    }
    const trunk = marks.filter((m) => m.what === 'trunk');
    const layer = marks.filter((m) => m.what.startsWith('layer'));
    const t0 = marks[0].t;
    const trunkEnd = trunk[trunk.length - 1];
    const trunkMBps = trunkEnd.done / 1e6 / ((trunkEnd.t - t0) / 1000);
    const secondsPerExpert = (layer[layer.length - 1].t - layer[0].t) / 1000 / (layer.length - 1);
    const trainSeconds = (layer[0].t - trunkEnd.t) / 1000 - secondsPerExpert;
    const expertMBps = perExpert / 1e6 / secondsPerExpert;
    const expertMBpsPerCore = expertMBps / threads;
    // the trunk stays on one core; encoding spreads over the cores at the measured per-core rate;
    // training (partly serial JavaScript) is taken as measured, no faster on more cores
    const layerSeconds = trainSeconds + (full.moe.experts * secondsPerExpert * threads) / projectCores;
    const projectedHours = (klTrunkBytes / 1e6 / trunkMBps + moeLayers * layerSeconds) / 3600;
    rows.push({ threads, trunkMBps, trainSeconds, secondsPerExpert, expertMBps, expertMBpsPerCore, projectedHours });
  }
  return { shape, checkpoint: dir, experts, projectCores, klExpertBytes, klTrunkBytes, rows };
}

export function renderConvertBench(r: ConvertBenchResult): string {
  return (
    `conversion of ${r.shape} shapes (${r.checkpoint}); projection: the full model = ${(r.klExpertBytes / 1e9).toFixed(1)} GB of experts + ${(r.klTrunkBytes / 1e9).toFixed(1)} GB of trunk (bf16) on ${r.projectCores} cores at the per-core rate measured\n` +
    table(
      r.rows.map((x) => [
        x.threads,
        x.trunkMBps.toFixed(1),
        x.trainSeconds.toFixed(2),
        x.secondsPerExpert.toFixed(3),
        x.expertMBps.toFixed(1),
        x.expertMBpsPerCore.toFixed(1),
        x.projectedHours.toFixed(2),
      ]),
      ['threads', 'trunk MB/s', 'train s/layer', 's/expert', 'experts MB/s', 'MB/s/core', `full model h @${r.projectCores} cores`],
    )
  );
}
