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
import type { TrunkWeights } from '../model/base/network.js';
import { ARCHITECTURES, architecture, parseModelConfig } from '../model/registry.js';
import { synthConfig } from '../synth/synth.js';
import { WasteError, quoted } from '../util/errors.js';
import { Fields } from '../util/fields.js';

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
  /** A real-width shape of any family (`waste synth --shape`). */
  shape: string;
  tokens: number;
  readBandwidth: Record<number, number>;
  /**
   * Per thread count and activations: decode tok/s, and the ms one token of the full model would
   * take with every expert in memory (its layer counts × ms per layer) with the experts' bytes it reads.
   */
  runs: { threads: number; activations: Activations; tokensPerSecond: number; fullToken: { ms: number; expertBytes: number } }[];
  rows: LayerBenchRow[];
}

/** The shapes `bench --layers` takes: every family's releases at their real widths. */
export function layerBenchShapes(): string[] {
  const out: string[] = [];
  for (const a of ARCHITECTURES) for (const s of a.synth?.realShapes ?? []) if (!out.includes(s)) out.push(s);
  return out;
}

const stored = (t: Tensor) => {
  const s = storedSizes(t.fmt, t.rows, t.cols, t.group);
  return s.payload + s.scaleBytes;
};

const isTensor = (x: object): x is Tensor => 'fmt' in x && 'rowBytes' in x && 'rows' in x;

/** Bytes a decode step reads of a layer's part: every tensor and vector in it (a checkpoint's dense experts excepted: a container streams them). */
function partBytes(x: unknown): number {
  if (x instanceof Float32Array) return x.byteLength;
  if (Array.isArray(x)) return x.reduce((t: number, y) => t + partBytes(y), 0);
  if (!x || typeof x !== 'object' || Object.getPrototypeOf(x) !== Object.prototype) return 0;
  if (isTensor(x)) return stored(x);
  let t = 0;
  for (const [k, v] of Object.entries(x)) if (k !== 'dense') t += partBytes(v);
  return t;
}

/** A full model's layer counts per phase (each layer's attention kind and FFN kind), from its shape's config. */
export function fullCounts(shape: string): Record<string, number> {
  const cfg = parseModelConfig(Fields.root('synthetic config', synthConfig({ shape })));
  const n: Record<string, number> = { head: 1 };
  for (const k of cfg.layerKinds) {
    n[k.attn] = (n[k.attn] ?? 0) + 1;
    n[k.ffn] = (n[k.ffn] ?? 0) + 1;
  }
  return n;
}

/** The default routed experts a bench container keeps per layer: enough for the router to choose among, few enough to write in minutes. */
function benchExperts(shape: string): number {
  const cfg = parseModelConfig(Fields.root('synthetic config', synthConfig({ shape })));
  if (shape === 'k3') return 48;
  return Math.min(cfg.moe.experts, 256);
}

/**
 * Decode with a real model's shapes — any family's release at its real widths (Kimi-Linear, K3,
 * Qwen3-30B-A3B…) — and every expert in memory: ms per layer of each kind (attention of each kind,
 * dense FFN, MoE), next to the bytes each must read divided by the memory read bandwidth measured
 * in the same run; and what a whole token of the full model would take.
 */
export async function benchLayers(opts: { shape?: string; dir?: string; layers?: number; experts?: number; tokens?: number; threads?: number[]; activations?: Activations[]; log?: (s: string) => void } = {}): Promise<LayerBenchResult> {
  const log = opts.log ?? (() => {});
  const shape = opts.shape ?? 'kimi-linear';
  if (!layerBenchShapes().includes(shape)) throw new WasteError('E_ARG', `bench --layers: unknown shape ${quoted(shape)} (expected ${layerBenchShapes().join(', ')})`);
  const layers = opts.layers ?? 4;
  const experts = opts.experts ?? benchExperts(shape);
  const tokens = opts.tokens ?? 16;
  const threadCounts = opts.threads ?? [...new Set([1, Math.max(2, cpuCount())])];
  const dir = opts.dir ?? path.join(os.tmpdir(), `waste-bench-${shape}-L${layers}-E${experts}`);
  const full = fullCounts(shape);
  const benchCfg = parseModelConfig(Fields.root('synthetic config', synthConfig({ shape, layers, experts })));
  const missing = Object.keys(full).filter((k) => k !== 'head' && !benchCfg.layerKinds.some((x) => x.attn === k || x.ffn === k));
  if (missing.length) throw new WasteError('E_ARG', `bench --layers: ${layers} layers of ${shape} hold no ${missing.join(' or ')} layer, so a full token cannot be projected (take more layers)`);
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
      const cfg = models[0].config;
      const arch = architecture(cfg.arch);
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
      // the state a step reads, per layer: a key/value cache or latent cache as long as the mean position, a recurrent state whole
      const stateAt = arch.stateBytes(cfg, 8 + tokens / 2);
      for (let j = 0; j < models.length; j++) {
        const m = models[j];
        const activations = modes[j];
        const prof = profs[j];
        const w = (m.net as unknown as { weights: TrunkWeights<{ attn: unknown; ffn: unknown }> }).weights;
        // each phase as the first layer of its kind has it (later layers of a kind are alike)
        const phases: [string, number][] = [];
        for (const kind of new Set(cfg.layerKinds.map((k) => k.attn))) {
          const L = cfg.layerKinds.findIndex((k) => k.attn === kind);
          phases.push([kind, partBytes(w.layers[L].attn) + stateAt[L]]);
        }
        for (const kind of new Set(cfg.layerKinds.map((k) => k.ffn))) {
          const L = cfg.layerKinds.findIndex((k) => k.ffn === kind);
          const bank = m.container!.banks.get(L);
          phases.push([kind, partBytes(w.layers[L].ffn) + (kind === 'moe' && bank ? cfg.moe.topK * (bank.layout.payloadEnd - 48) : 0)]);
        }
        phases.push(['head', stored(w.lmHead)]);
        let fullMs = 0;
        for (const [phase, bytes] of phases) {
          const here = phase === 'head' ? 1 : cfg.layerKinds.filter((k) => k.attn === phase || k.ffn === phase).length;
          const ms = (prof[phase] ?? 0) / tokens / here;
          result.rows.push({ phase, threads, activations, msPerLayer: ms, bytes, floorMs: (bytes / readBandwidth[threads]) * 1000 });
          fullMs += ms * (full[phase] ?? 0);
        }
        const bank = [...m.container!.banks.values()][0];
        result.runs.push({ threads, activations, tokensPerSecond: tokens / elapsed[j], fullToken: { ms: fullMs, expertBytes: (full.moe ?? 0) * cfg.moe.topK * bank.stride } });
      }
    } finally {
      for (const m of models) await m.close();
    }
  }
  return result;
}

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
