import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { storedSizes } from '../container/tensor.js';
import type { Tensor } from '../container/tensor.js';
import { Model } from '../api/model.js';
import { DEFAULT_ACTIVATIONS } from '../engine/options.js';
import type { Activations } from '../kernels/types.js';
import { WasmKernels } from '../kernels/wasm/index.js';
import { cpuCount } from '../kernels/wasm/pool.js';
import { Arena } from '../memory/arena.js';
import { writeSyntheticContainer } from '../synth/synth.js';
import { table, timeIt } from './measure.js';
import type { LayerWeights } from '../model/kimi/weights.js';
import type { KimiConfig } from '../model/kimi/config.js';
import type { TrunkWeights } from '../model/base/network.js';

export interface LayerBenchRow {
  phase: string;
  threads: number;
  activations: Activations;
  msPerLayer: number;
  /** Bytes the phase must read per token per layer. */
  bytes: number;
  /** bytes ÷ the read bandwidth measured in this run, in ms. */
  floorMs: number;
}

export interface LayerBenchResult {
  container: string;
  shape: 'kimi-linear' | 'k3';
  tokens: number;
  readBandwidth: Record<number, number>;
  /**
   * Per thread count and activations: decode tok/s, and the ms one token of the full model would
   * take with every expert in memory (its layer counts × ms per layer) with the experts' bytes it reads.
   */
  runs: { threads: number; activations: Activations; tokensPerSecond: number; fullToken: { ms: number; expertBytes: number } }[];
  rows: LayerBenchRow[];
}

const stored = (t: Tensor) => {
  const s = storedSizes(t.fmt, t.rows, t.cols, t.group);
  return s.payload + s.scaleBytes;
};

/**
 * Decode with a real model's shapes — Kimi-Linear (hidden 2304, 256 experts of width 1024, top-8)
 * or Kimi K3 (hidden 7168, experts of 3072 on a 3584 latent, top-16) — and every expert in memory:
 * ms per KDA, MLA and MoE layer, next to the bytes each must read divided by the memory read
 * bandwidth measured in the same run; and what a whole token of the full model would take.
 */
export async function benchLayers(opts: { shape?: 'kimi-linear' | 'k3'; dir?: string; layers?: number; experts?: number; tokens?: number; threads?: number[]; activations?: Activations[]; log?: (s: string) => void } = {}): Promise<LayerBenchResult> {
  const log = opts.log ?? (() => {});
  const shape = opts.shape ?? 'kimi-linear';
  const layers = opts.layers ?? 4;
  const experts = opts.experts ?? (shape === 'k3' ? 48 : 256);
  const tokens = opts.tokens ?? 16;
  const threadCounts = opts.threads ?? [...new Set([1, Math.max(2, cpuCount())])];
  const dir = opts.dir ?? path.join(os.tmpdir(), `waste-bench-${shape}-L${layers}-E${experts}`);
  if (!fs.existsSync(path.join(dir, 'manifest.json'))) {
    log(`writing a synthetic ${shape} container (${layers} layers, ${experts} experts) to ${dir}…`);
    writeSyntheticContainer(dir, { shape, layers, experts, seed: 1, force: true });
  }

  // The read bandwidth of an arena, per thread count, on a region far larger than the caches.
  const bwArena = new Arena(1 << 30);
  const region = bwArena.alloc((1 << 30) - (1 << 20), 4096);
  const bytesView = bwArena.u8(region, (1 << 30) - (1 << 20));
  for (let i = 0; i < bytesView.length; i += 4096) bytesView[i] = 1;
  const out = bwArena.allocF32(4096);
  const readBandwidth: Record<number, number> = {};
  for (const threads of threadCounts) {
    const k = await WasmKernels.create(threads, [bwArena]);
    const sec = timeIt(() => k.readBandwidth(bwArena, region, 1 << 20, 1000, out), 0.3);
    readBandwidth[threads] = (1000 << 20) / sec;
    await k.close();
  }

  const result: LayerBenchResult = { container: dir, shape, tokens, readBandwidth, runs: [], rows: [] };
  const modes = opts.activations ?? [DEFAULT_ACTIVATIONS];
  for (const threads of threadCounts) {
    // with several modes every model is open at once and their tokens alternate, so a noisy
    // moment of the host slows each of them alike
    log(`decoding with ${threads} thread${threads > 1 ? 's' : ''}, ${modes.join(' and ')} activations…`);
    const models: Model[] = [];
    try {
      for (const activations of modes) models.push(await Model.open(dir, { threads, activations, preloadExperts: true, maxContext: 256 }));
      // every architecture this build runs is of the Kimi family
      const cfg = models[0].config as KimiConfig;
      const sessions = models.map((m) => m.newSession());
      for (const s of sessions) await s.forward([1, 2, 3, 4, 5, 6, 7, 8]);
      const profs = models.map((m) => m.profile());
      const elapsed = models.map(() => 0);
      for (let i = 0; i < tokens; i++)
        for (let j = 0; j < models.length; j++) {
          const t0 = performance.now();
          await sessions[j].forward([(i * 7919) % cfg.vocab]);
          elapsed[j] += (performance.now() - t0) / 1000;
        }
      for (let j = 0; j < models.length; j++) {
        const m = models[j];
        const activations = modes[j];
        const prof = profs[j];
        // Bytes each phase must read per token, from the model's own tensors.
        const w = (m.net as unknown as { weights: TrunkWeights<LayerWeights> }).weights;
        const count = (kind: string) => cfg.layerKinds.filter((k) => k.attn === kind || k.ffn === kind).length;
        const first = (pred: (l: (typeof w.layers)[number]) => boolean) => w.layers.find(pred)!;
        const phases: [string, number][] = [];
        // the sublayers, as the first layer of each kind has them (later MoE layers are alike)
        const kdaL = w.layers.find((l) => l.attn.kind === 'kda');
        if (kdaL && kdaL.attn.kind === 'kda') {
          const a = kdaL.attn;
          const gate = 'low' in a.gate ? a.gate.low : [a.gate.full];
          const mats = [a.qProj, a.kProj, a.vProj, a.fA, a.fB, a.bProj, ...gate, a.oProj].reduce((t, x) => t + stored(x), 0);
          phases.push(['kda', mats + 4 * cfg.kda.heads * cfg.kda.headDim * cfg.kda.headDim * 4]);
        }
        const mlaL = w.layers.find((l) => l.attn.kind === 'mla');
        if (mlaL && mlaL.attn.kind === 'mla') {
          const a = mlaL.attn;
          const pos = 8 + tokens / 2;
          const q = 'proj' in a.q ? [a.q.proj] : [a.q.a, a.q.b];
          phases.push(['mla', [...q, a.kvA, a.kvB, ...(a.gProj ? [a.gProj] : []), a.oProj].reduce((t, x) => t + stored(x), 0) + pos * (cfg.mla.kvLoraRank + cfg.mla.qkRope) * 4]);
        }
        const moeL = first((l) => l.ffn.kind === 'moe');
        if (moeL && moeL.ffn.kind === 'moe') {
          const f = moeL.ffn;
          const bank = m.container!.banks.get(w.layers.indexOf(moeL))!;
          const shared = f.shared ? stored(f.shared.gate) + stored(f.shared.up) + stored(f.shared.down) : 0;
          const latent = f.latent ? stored(f.latent.down) + stored(f.latent.up) : 0;
          phases.push(['moe', stored(f.router) + shared + latent + cfg.moe.topK * (bank.layout.payloadEnd - 48)]);
        }
        const denseL = w.layers.find((l) => l.ffn.kind === 'dense');
        if (denseL && denseL.ffn.kind === 'dense') phases.push(['dense', stored(denseL.ffn.gate) + stored(denseL.ffn.up) + stored(denseL.ffn.down)]);
        const head = stored(w.lmHead);
        phases.push(['head', head]);
        const full = FULL[shape];
        let fullMs = 0;
        for (const [phase, bytes] of phases) {
          const n = phase === 'head' ? 1 : count(phase);
          const ms = (prof[phase] ?? 0) / tokens / n;
          result.rows.push({ phase, threads, activations, msPerLayer: ms, bytes, floorMs: (bytes / readBandwidth[threads]) * 1000 });
          fullMs += ms * (phase === 'head' ? 1 : full[phase as keyof typeof full]);
        }
        const bank = [...m.container!.banks.values()][0];
        result.runs.push({ threads, activations, tokensPerSecond: tokens / elapsed[j], fullToken: { ms: fullMs, expertBytes: full.moe * cfg.moe.topK * bank.stride } });
      }
    } finally {
      for (const m of models) await m.close();
    }
  }
  return result;
}

/** The full models' layer counts: K3 has 69 KDA, 24 MLA, 1 dense and 92 MoE layers; Kimi-Linear 48B 20, 7, 1 and 26. */
const FULL = {
  'kimi-linear': { kda: 20, mla: 7, dense: 1, moe: 26 },
  k3: { kda: 69, mla: 24, dense: 1, moe: 92 },
};

export function renderLayerBench(r: LayerBenchResult): string {
  const bw = Object.entries(r.readBandwidth).map(([t, b]) => `${(b / 1e9).toFixed(1)} GB/s with ${t} thread${t === '1' ? '' : 's'}`);
  const label = (threads: number, activations: Activations) => `${threads} thread${threads === 1 ? '' : 's'}, ${activations} activations`;
  return (
    `decode, everything in memory, ${r.tokens} tokens (${r.container})\n` +
    `measured read bandwidth: ${bw.join(', ')}\n` +
    r.runs
      .map(
        (x) =>
          `${label(x.threads, x.activations)}: decode ${x.tokensPerSecond.toFixed(2)} tok/s; the full ${r.shape} model, every expert in memory: ${x.fullToken.ms.toFixed(0)} ms a token (${(1000 / x.fullToken.ms).toFixed(2)} tok/s); its experts are ${(x.fullToken.expertBytes / 1e9).toFixed(2)} GB a token\n`,
      )
      .join('') +
    table(
      r.rows.map((x) => [x.phase, x.threads, x.activations, x.msPerLayer.toFixed(3), (x.bytes / 2 ** 20).toFixed(2), x.floorMs.toFixed(3), (x.msPerLayer / x.floorMs).toFixed(2)]),
      ['phase', 'thr', 'activations', 'ms/layer', 'MiB read', 'floor ms', '× floor'],
    )
  );
}
