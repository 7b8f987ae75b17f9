import { Fmt, fmtName } from '../container/format.js';
import { type Tensor, makeViews, storedSizes } from '../container/tensor.js';
import { WasmKernels } from '../kernels/wasm/index.js';
import { cpuCount } from '../kernels/wasm/pool.js';
import { Arena } from '../memory/arena.js';
import { encodeF16 } from '../util/f16.js';
import { Rng } from '../util/prng.js';
import type { Activations } from '../kernels/types.js';
import { table, timeIt } from './measure.js';

export interface KernelBenchRow {
  kernel: string;
  size: string;
  threads: number;
  secondsPerCall: number;
  /** Weight (or state) bytes read per second. */
  bytesPerSecond?: number;
  /** VQ lookups per second. */
  lookupsPerSecond?: number;
  /** bytesPerSecond ÷ the arena read bandwidth measured with the same thread count. */
  fractionOfReadBandwidth?: number;
  /** For Q8G/Q4G products: the activations they ran with (both are measured, pass for pass). */
  activations?: Activations;
}

export interface KernelBenchResult {
  readBandwidth: Record<number, number>;
  rows: KernelBenchRow[];
}

/**
 * Kernel throughput, per kernel and thread count, next to the arena's memory read bandwidth
 * measured in the same run on the same memory. Matrices "far larger than the caches" are 256 MiB.
 * Q8G and Q4G products run with exact and with 16-bit activations, their passes interleaved so a
 * noisy moment of the host hits both alike.
 */
export async function benchKernels(opts: { threads?: number[]; quick?: boolean; log?: (s: string) => void } = {}): Promise<KernelBenchResult> {
  const log = opts.log ?? (() => {});
  const threadCounts = opts.threads ?? [...new Set([1, Math.max(2, cpuCount())])];
  const big = opts.quick ? 32 << 20 : 256 << 20;
  const minT = opts.quick ? 0.05 : 0.2;
  const rng = new Rng(7);
  const arena = new Arena(4 * big + (400 << 20));
  const cols = 4096;

  const tensor = (fmt: number, bytes: number): Tensor => {
    const rowBytes = storedSizes(fmt, 1, cols, 128);
    const rows = Math.max(1, Math.floor(bytes / (rowBytes.payload + rowBytes.scaleBytes)));
    const s = storedSizes(fmt, rows, cols, 128);
    const off = arena.alloc(s.payload, 4096);
    const scaleOff = s.scaleBytes ? arena.alloc(s.scaleBytes, 64) : -1;
    const t: Tensor = { name: fmtName(fmt), fmt, shape: [rows, cols], rows, cols, group: 128, groups: s.groups, rowBytes: s.rowBytes, arena, off, scaleOff };
    makeViews(t);
    const bytesView = arena.u8(off, s.payload);
    if (fmt === Fmt.F32) for (let i = 0; i < t.f32!.length; i++) t.f32![i] = rng.uniform(-1, 1);
    else if (fmt === Fmt.F16) for (let i = 0; i < t.f16!.length; i++) t.f16![i] = encodeF16(rng.uniform(-1, 1));
    else rng.fillBytes(bytesView);
    if (t.scales) for (let i = 0; i < t.scales.length; i++) t.scales[i] = encodeF16(rng.uniform(0.001, 0.01));
    return t;
  };
  const weightBytes = (t: Tensor) => {
    const s = storedSizes(t.fmt, t.rows, t.cols, t.group);
    return s.payload + s.scaleBytes;
  };

  log('preparing buffers…');
  const dram = [Fmt.Q8G, Fmt.Q4G, Fmt.F32, Fmt.F16].map((f) => tensor(f, big));
  const l2 = [Fmt.Q8G, Fmt.Q4G, Fmt.F32].map((f) => tensor(f, 1 << 20));
  const x = arena.allocF32(cols);
  for (let i = 0; i < cols; i++) x[i] = rng.uniform(-1, 1);
  const yOut = arena.allocF32(1 << 20);

  // VQ3R at Kimi-Linear's expert shapes: gate/up 1024×2304, down 2304×1024; many experts, so
  // the indices stream from memory as they do when experts come from the cache.
  const H = 2304;
  const I = 1024;
  const st = 3;
  const en = 256;
  const recBytes = (Math.ceil(I / 64) * 64 * (H / 8) * st) * 2 + Math.ceil(H / 64) * 64 * (I / 8) * st + 2 * (2 * I + H);
  const nrec = Math.max(4, Math.floor((opts.quick ? 32 << 20 : 256 << 20) / recBytes));
  const recs = arena.alloc(nrec * recBytes, 4096);
  rng.fillBytes(arena.u8(recs, nrec * recBytes));
  const lutG = arena.allocF32((H / 8) * st * en);
  const lutD = arena.allocF32((I / 8) * st * en);
  for (let i = 0; i < lutG.length; i++) lutG[i] = rng.uniform(-1, 1);
  for (let i = 0; i < lutD.length; i++) lutD[i] = rng.uniform(-1, 1);
  const books = arena.allocF32(st * 8 * en);
  for (let i = 0; i < books.length; i++) books[i] = rng.uniform(-1, 1);
  const xh = arena.allocF32(H);
  for (let i = 0; i < H; i++) xh[i] = rng.uniform(-1, 1);
  const geom = { stages: st, entries: en, vecDim: 8, indexBlock: 64 };
  const gateIdx = Math.ceil(I / 64) * 64 * (H / 8) * st;
  const downIdx = Math.ceil(H / 64) * 64 * (I / 8) * st;

  // KDA state and MLA cache at Kimi-Linear's shapes.
  const NH = 32;
  const D = 128;
  const S = arena.allocF32(NH * D * D);
  const kq = arena.allocF32(NH * D);
  for (let i = 0; i < kq.length; i++) kq[i] = rng.uniform(-0.1, 0.1);
  const gl = arena.allocF32(NH * D);
  gl.fill(-0.01);
  const beta = arena.allocF32(NH);
  beta.fill(0.5);
  const o = arena.allocF32(NH * D);
  const ctxLen = 4096;
  const kvl = 512;
  const rope = 64;
  const cache = arena.allocF32(ctxLen * (kvl + rope));
  for (let i = 0; i < cache.length; i += 97) cache[i] = rng.uniform(-1, 1);
  const kvB = tensor(Fmt.Q4G, 0);
  const kvBt = (() => {
    const s = storedSizes(Fmt.Q4G, NH * 256, kvl, 128);
    const off = arena.alloc(s.payload, 64);
    const so = arena.alloc(s.scaleBytes, 64);
    const t: Tensor = { name: 'kv_b', fmt: Fmt.Q4G, shape: [NH * 256, kvl], rows: NH * 256, cols: kvl, group: 128, groups: s.groups, rowBytes: s.rowBytes, arena, off, scaleOff: so };
    makeViews(t);
    rng.fillBytes(t.q!);
    for (let i = 0; i < t.scales!.length; i++) t.scales![i] = encodeF16(0.01);
    return t;
  })();
  void kvB;
  const qm = arena.allocF32(NH * 192);
  for (let i = 0; i < qm.length; i++) qm[i] = rng.uniform(-1, 1);
  const mla = { qLat: arena.allocF32(NH * kvl), scores: arena.allocF32(NH * ctxLen), ctx: arena.allocF32(NH * kvl), o: arena.allocF32(NH * 128) };

  const result: KernelBenchResult = { readBandwidth: {}, rows: [] };
  const readRegion = dram[0].off;
  const readBytes = dram.reduce((s, t) => s + weightBytes(t), 0) - 1;
  for (const threads of threadCounts) {
    const k = await WasmKernels.create(threads, [arena]);
    const k16 = await WasmKernels.create(threads, [arena], { activations: 'a16' });
    try {
      log(`measuring with ${threads} thread${threads > 1 ? 's' : ''}…`);
      const rowBytes = 1 << 20;
      const rows = Math.floor(readBytes / rowBytes);
      const tRead = timeIt(() => k.readBandwidth(arena, readRegion, rowBytes, rows, yOut), minT);
      const bw = (rows * rowBytes) / tRead;
      result.readBandwidth[threads] = bw;
      result.rows.push({ kernel: 'memory read', size: `${(rows * rowBytes) >> 20} MiB`, threads, secondsPerCall: tRead, bytesPerSecond: bw, fractionOfReadBandwidth: 1 });
      const mv = (t: Tensor, label: string) => {
        const quantized = t.fmt === Fmt.Q8G || t.fmt === Fmt.Q4G;
        const modes: [Activations | undefined, WasmKernels][] = quantized ? [['exact', k], ['a16', k16]] : [[undefined, k]];
        const best = modes.map(() => Infinity);
        for (let pass = 0; pass < 3; pass++) modes.forEach(([, kk], i) => (best[i] = Math.min(best[i], timeIt(() => kk.matmul(t, x, yOut, 1), minT, 1))));
        modes.forEach(([activations], i) => {
          const bps = weightBytes(t) / best[i];
          result.rows.push({ kernel: `matvec ${fmtName(t.fmt)}`, size: label, threads, secondsPerCall: best[i], bytesPerSecond: bps, fractionOfReadBandwidth: bps / bw, ...(activations ? { activations } : {}) });
        });
      };
      for (const t of dram) mv(t, `${t.rows}×${cols} (${(weightBytes(t) / 2 ** 20).toFixed(0)} MiB)`);
      for (const t of l2) mv(t, `${t.rows}×${cols} (${(weightBytes(t) / 2 ** 20).toFixed(1)} MiB, cache)`);

      let r = 0;
      const recAt = (i: number) => arena.u8(recs + i * recBytes, recBytes);
      const secVq = timeIt(() => {
        const rec = recAt(r++ % nrec);
        k.vqApply(rec, 0, gateIdx * 3, I, H, geom, lutG, yOut);
        k.vqApply(rec, gateIdx, gateIdx * 3, I, H, geom, lutG, yOut);
        k.vqApply(rec, 2 * gateIdx, gateIdx * 3, H, I, geom, lutD, yOut);
      }, minT);
      const lookups = (2 * I * (H / 8) + H * (I / 8)) * st;
      result.rows.push({ kernel: 'vq3r apply', size: `expert ${I}×${H}, ${nrec} records`, threads, secondsPerCall: secVq, lookupsPerSecond: lookups / secVq, bytesPerSecond: (2 * gateIdx + downIdx) / secVq });
      const secLut = timeIt(() => k.vqLut(books, st, en, 8, xh, H, lutG), minT);
      result.rows.push({ kernel: 'vq3r table build', size: `${H} inputs`, threads, secondsPerCall: secLut });
      const secKda = timeIt(() => k.kdaStep(NH, D, kq, kq, kq, gl, beta, S, o), minT);
      result.rows.push({ kernel: 'kda step', size: `${NH}×${D}×${D}`, threads, secondsPerCall: secKda, bytesPerSecond: (4 * S.byteLength) / secKda });
      const secMla = timeIt(
        () => k.mlaHeads({ kvB: kvBt, q: qm, heads: NH, nope: 128, rope, vh: 128, kvl, cache, n: ctxLen, scale: 0.07, ...mla }),
        minT,
      );
      result.rows.push({ kernel: 'mla attention', size: `${NH} heads, ${ctxLen} positions`, threads, secondsPerCall: secMla, bytesPerSecond: (ctxLen * (kvl + rope) * 4 + weightBytes(kvBt)) / secMla });
    } finally {
      await k.close();
      await k16.close();
    }
  }
  return result;
}

export function renderKernelBench(r: KernelBenchResult): string {
  const f = (n?: number, d = 2) => (n === undefined ? '' : n.toFixed(d));
  const pairs = r.rows.filter((x) => x.activations === 'exact').map((e) => {
    const a = r.rows.find((x) => x.activations === 'a16' && x.kernel === e.kernel && x.size === e.size && x.threads === e.threads)!;
    return [e.kernel, e.size, e.threads, f(e.bytesPerSecond! / 1e9), f(e.fractionOfReadBandwidth), f(a.bytesPerSecond! / 1e9), f(a.fractionOfReadBandwidth), f(e.secondsPerCall / a.secondsPerCall)];
  });
  const side = pairs.length ? '\nQ8G/Q4G activations, side by side:\n' + table(pairs, ['kernel', 'size', 'thr', 'exact GB/s', '× read bw', 'a16 GB/s', '× read bw', 'a16 / exact']) : '';
  return table(
    r.rows.map((x) => [
      x.kernel + (x.activations ? ` (${x.activations})` : ''),
      x.size,
      x.threads,
      f(x.secondsPerCall * 1e6, 1),
      x.bytesPerSecond ? f(x.bytesPerSecond / 1e9) : '',
      x.lookupsPerSecond ? f(x.lookupsPerSecond / 1e9) : '',
      x.fractionOfReadBandwidth !== undefined ? f(x.fractionOfReadBandwidth) : '',
    ]),
    ['kernel', 'size', 'thr', 'µs/call', 'GB/s', 'G lookups/s', '× read bw'],
  ) + side;
}
