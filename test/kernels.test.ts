import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Fmt } from '../src/container/format.js';
import { type Tensor, makeViews, storedSizes } from '../src/container/tensor.js';
import { tsKernels } from '../src/kernels/ts/index.js';
import type { Kernels, VqGeometry } from '../src/kernels/types.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import { Arena } from '../src/memory/arena.js';
import { encodeF16 } from '../src/util/f16.js';
import { Rng } from '../src/util/prng.js';
import { kernelsOn1To3Threads, relErr, sameBits, testSeed } from './helpers.js';

/**
 * Every WebAssembly kernel against its TypeScript reference on fresh random inputs of awkward sizes
 * (not multiples of 4, 8, 64 or 128), and against itself with 1, 2 and 3 threads: bit-identical.
 */
const arena = new Arena(64 << 20);
// fresh inputs every run; a failure names its seed, and WASTE_TEST_SEED=N replays it
const seed = testSeed('kernels');
const rng = new Rng(seed);
const on = kernelsOn1To3Threads(arena);

function randF32(n: number, lo = -1, hi = 1): Float32Array {
  const a = arena.allocF32(n);
  for (let i = 0; i < n; i++) a[i] = rng.uniform(lo, hi);
  return a;
}

function randTensor(fmt: number, rows: number, cols: number, group = 128): Tensor {
  const s = storedSizes(fmt, rows, cols, group);
  const off = arena.alloc(s.payload, 64);
  const scaleOff = s.scaleBytes ? arena.alloc(s.scaleBytes, 64) : -1;
  const t: Tensor = { name: 'test', fmt, shape: [rows, cols], rows, cols, group, groups: s.groups, rowBytes: s.rowBytes, arena, off, scaleOff };
  makeViews(t);
  if (t.f32) for (let i = 0; i < t.f32.length; i++) t.f32[i] = rng.uniform(-1, 1);
  if (t.f16) for (let i = 0; i < t.f16.length; i++) t.f16[i] = encodeF16(rng.uniform(-1, 1));
  if (t.q) {
    rng.fillBytes(t.q);
    for (let i = 0; i < t.scales!.length; i++) t.scales![i] = encodeF16(rng.uniform(0.001, 0.05));
  }
  return t;
}

/**
 * Run `op` with each implementation on fresh copies of `outs`; the WASM results must agree. The
 * error is measured against max |reference|, or against `scale` when given: a sum whose terms cancel
 * can be far smaller than its terms, and rounding is proportional to the terms.
 */
function compare(name: string, outs: Float32Array[], op: (k: Kernels) => void, tol = 2e-5, scale?: number): void {
  const init = outs.map((o) => o.slice());
  const results = new Map<string, Float32Array[]>();
  for (const [label, k] of [['ts', tsKernels], ['w1', on.w1], ['w2', on.w2], ['w3', on.w3]] as [string, Kernels][]) {
    outs.forEach((o, i) => o.set(init[i]));
    op(k);
    results.set(label, outs.map((o) => o.slice()));
  }
  const ref = results.get('ts')!;
  const one = results.get('w1')!;
  ref.forEach((r, i) => {
    const err = scale === undefined ? relErr(one[i], r) : maxAbsDiff(one[i], r) / scale;
    assert.ok(err <= tol, `${name} [seed ${seed}]: output ${i} differs from the reference by ${err}`);
  });
  for (const label of ['w2', 'w3'])
    results.get(label)!.forEach((o, i) => assert.ok(sameBits(o, one[i]), `${name} [seed ${seed}]: ${label} differs from 1 thread in output ${i}`));
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

/** max over outputs of Σ |w| |x|: the size of the terms each output of a product adds up. */
function termScale(w: Tensor, X: Float32Array, T: number): number {
  const abs = randTensor(w.fmt, w.rows, w.cols, w.group);
  if (w.f32) for (let i = 0; i < w.f32.length; i++) abs.f32![i] = Math.abs(w.f32[i]);
  if (w.f16) for (let i = 0; i < w.f16.length; i++) abs.f16![i] = w.f16[i] & 0x7fff;
  if (w.q) {
    abs.scales!.set(w.scales!);
    if (w.fmt === Fmt.Q8G) for (let i = 0; i < w.q.length; i++) abs.q![i] = Math.abs((w.q[i] << 24) >> 24) & 0xff;
    // nibbles hold q + 8 (q in −8..7); |q| ≤ 8 does not fit, so −8 counts as 7 (a 1/8 underestimate, never an excuse)
    else for (let i = 0; i < w.q.length; i++) abs.q![i] = nib(w.q[i] & 15) | (nib(w.q[i] >> 4) << 4);
  }
  const ax = arena.allocF32(X.length);
  for (let i = 0; i < X.length; i++) ax[i] = Math.abs(X[i]);
  const y = arena.allocF32(T * w.rows);
  tsKernels.matmul(abs, ax, y, T);
  return Math.max(...y);
}

const nib = (n: number) => Math.min(7, Math.abs(n - 8)) + 8;

const FORMATS: [string, number][] = [['F32', Fmt.F32], ['F16', Fmt.F16], ['Q8G', Fmt.Q8G], ['Q4G', Fmt.Q4G]];

describe('kernels: WebAssembly vs TypeScript reference', () => {
  for (const [fname, fmt] of FORMATS) {
    it(`matmul ${fname}`, () => {
      for (const [rows, cols, T] of [[1, 5, 1], [37, 131, 1], [129, 300, 3], [70, 1001, 2], [261, 257, 1]]) {
        const w = randTensor(fmt, rows, cols);
        const X = randF32(T * cols);
        const Y = arena.allocF32(T * rows);
        compare(`matmul ${fname} ${rows}×${cols}×${T}`, [Y], (k) => k.matmul(w, X, Y, T), 2e-5, termScale(w, X, T));
      }
    });
    it(`matvecT ${fname}`, () => {
      for (const [rows, cols, row0, n] of [[9, 13, 2, 5], [40, 131, 3, 33], [300, 517, 100, 129]]) {
        const w = randTensor(fmt, rows, cols);
        const c = randF32(n);
        c[1] = 0; // zero coefficients are skipped
        const y = arena.allocF32(cols);
        compare(`matvecT ${fname} ${rows}×${cols}`, [y], (k) => k.matvecT(w, c, y, row0, n));
      }
    });
  }

  it('a16 products of T tokens at once (four at a time, then the rest) have the bits of one token at a time, Q8G and Q4G, on 1–3 threads', async () => {
    const k16 = await Promise.all([1, 2, 3].map((n) => WasmKernels.create(n, [arena], { activations: 'a16' })));
    try {
      for (const [fmt, rows, cols, group] of [[Fmt.Q8G, 67, 300, 128], [Fmt.Q4G, 45, 1001, 128], [Fmt.Q8G, 130, 2304, 128], [Fmt.Q4G, 9, 256, 32]] as const) {
        const w = randTensor(fmt, rows, cols, group);
        for (const T of [1, 3, 4, 5, 8, 9]) {
          const X = randF32(T * cols, -4, 4);
          const one = arena.allocF32(T * rows);
          for (let t = 0; t < T; t++) k16[0].matmul(w, X.subarray(t * cols, (t + 1) * cols), one.subarray(t * rows, (t + 1) * rows), 1);
          for (const k of k16) {
            const all = arena.allocF32(T * rows).fill(NaN);
            k.matmul(w, X, all, T);
            assert.ok(sameBits(all, one), `${fmt === Fmt.Q8G ? 'Q8G' : 'Q4G'} ${rows}×${cols} T=${T} ${k.name} [seed ${seed}]: not the bits of one token at a time`);
          }
        }
      }
    } finally {
      await Promise.all(k16.map((k) => k.close()));
    }
  });

  it('matmulMany: the bits of one matmul per matrix (mixed formats, groups and row counts), exact and a16, on 1–3 threads', async () => {
    const k16 = await Promise.all([1, 2, 3].map((n) => WasmKernels.create(n, [arena], { activations: 'a16' })));
    try {
      // the last case is past the pool's wake-up threshold, so its rows are always split
      for (const [cols, T] of [[131, 1], [300, 3], [1001, 8]]) {
        // Q4G ×3 (one of another group), Q8G ×2, F32 ×1: three fused groups, two matrices alone
        const ws = [randTensor(Fmt.Q4G, 37, cols), randTensor(Fmt.Q4G, 1, cols), randTensor(Fmt.Q8G, 70, cols), randTensor(Fmt.F32, 9, cols), randTensor(Fmt.Q4G, 129, cols), randTensor(Fmt.Q8G, 5, cols), randTensor(Fmt.Q4G, 12, cols, 32)];
        const X = randF32(T * cols);
        for (const kernels of [[on.w1, on.w2, on.w3], k16]) {
          const want = ws.map((w) => {
            const y = arena.allocF32(T * w.rows);
            kernels[0].matmul(w, X, y, T);
            return y;
          });
          for (const k of kernels) {
            const got = ws.map((w) => arena.allocF32(T * w.rows).fill(NaN));
            k.matmulMany(ws, X, got, T);
            got.forEach((y, i) => assert.ok(sameBits(y, want[i]), `matmulMany ${k.name} ${cols}×${T}, matrix ${i} [seed ${seed}]: not the bits of matmul`));
          }
        }
        const ref = ws.map((w) => arena.allocF32(T * w.rows));
        tsKernels.matmulMany(ws, X, ref, T);
        const one = ws.map((w) => arena.allocF32(T * w.rows));
        ws.forEach((w, i) => tsKernels.matmul(w, X, one[i], T));
        ref.forEach((y, i) => assert.ok(sameBits(y, one[i]), `matmulMany typescript, matrix ${i}`));
      }
    } finally {
      await Promise.all(k16.map((k) => k.close()));
    }
  });

  it('rmsnorm, siluMul, add', () => {
    for (const n of [1, 7, 101, 1001]) {
      const x = randF32(n, -3, 3);
      const w = randF32(n);
      const out = arena.allocF32(n + 5);
      compare(`rmsnorm ${n}`, [out], (k) => k.rmsnorm(x, w, 1e-5, out, n, 0, 3));
      const a = randF32(n, -8, 8);
      const b = randF32(n);
      compare(`siluMul ${n}`, [a], (k) => k.siluMul(a, b, n));
      compare(`add ${n}`, [a], (k) => k.add(a, b, n));
    }
  });

  it('vqLut', () => {
    for (const [stages, entries, vecDim, vectors] of [[3, 256, 8, 37], [2, 13, 3, 11], [1, 256, 8, 1], [4, 64, 8, 129]]) {
      const books = randF32(stages * vecDim * entries);
      const x = randF32(vectors * vecDim, -2, 2);
      const lut = arena.allocF32(vectors * stages * entries);
      compare(`vqLut ${stages}×${entries}×${vecDim}`, [lut], (k) => k.vqLut(books, stages, entries, vecDim, x, vectors * vecDim, lut));
    }
  });

  it('vqLut has the bits of the f32 sums over the vector in order, on both its paths and 1–3 threads', () => {
    const f = Math.fround;
    // 8-dim vectors with entries a multiple of 16 take the kernel's fast path; 24 entries and 3-dim vectors the general one
    for (const [stages, entries, vecDim, vectors] of [[3, 256, 8, 41], [2, 24, 8, 9], [2, 16, 8, 3], [2, 13, 3, 11]]) {
      const books = randF32(stages * vecDim * entries);
      const x = randF32(vectors * vecDim, -2, 2);
      const want = new Float32Array(vectors * stages * entries);
      for (let v = 0; v < vectors; v++)
        for (let st = 0; st < stages; st++)
          for (let e = 0; e < entries; e++) {
            let a = 0;
            for (let d = 0; d < vecDim; d++) a = f(a + f(x[v * vecDim + d] * books[(st * vecDim + d) * entries + e]));
            want[(v * stages + st) * entries + e] = a;
          }
      for (const [label, k] of [['w1', on.w1], ['w2', on.w2], ['w3', on.w3]] as const) {
        const lut = arena.allocF32(vectors * stages * entries);
        k.vqLut(books, stages, entries, vecDim, x, vectors * vecDim, lut);
        assert.ok(sameBits(lut, want), `vqLut ${stages}×${entries}×${vecDim} ${label} [seed ${seed}]: not the f32 sums in order`);
      }
    }
  });

  it('vqApply over blocked and row-major indices', () => {
    for (const [rows, vectors, stages, entries, B] of [[130, 37, 3, 256, 64], [1, 5, 3, 256, 64], [67, 9, 2, 50, 64], [45, 13, 3, 256, 0], [100, 7, 3, 256, 7], [200, 288, 3, 256, 64]]) {
      const g: VqGeometry = { stages, entries, vecDim: 8, indexBlock: B };
      const padded = B > 0 ? Math.ceil(rows / B) * B : rows;
      const idxBytes = padded * vectors * stages;
      const recOff = arena.alloc(idxBytes + 2 * rows + 64, 4096);
      const rec = arena.u8(recOff, idxBytes + 2 * rows + 64);
      for (let i = 0; i < idxBytes; i++) rec[i + 48] = rng.int(entries);
      const scaleOff = 48 + idxBytes;
      for (let r = 0; r < rows; r++) {
        const h = encodeF16(rng.uniform(0.01, 0.2));
        rec[scaleOff + 2 * r] = h & 0xff;
        rec[scaleOff + 2 * r + 1] = h >> 8;
      }
      const lut = randF32(vectors * stages * entries);
      const y = arena.allocF32(rows);
      compare(`vqApply ${rows} rows B=${B}`, [y], (k) => k.vqApply(rec, 48, scaleOff, rows, vectors * 8, g, lut, y));
    }
  });

  it('vqLutPair and vqApplyPair: the same bits as two vqLut / vqApply calls, on 1–3 threads', () => {
    for (const [rows, vectors, stages, entries, B] of [[130, 37, 3, 256, 64], [1, 5, 3, 256, 64], [67, 9, 2, 50, 64], [45, 13, 3, 256, 0], [100, 7, 3, 256, 7], [1024, 288, 3, 256, 64]]) {
      const g: VqGeometry = { stages, entries, vecDim: 8, indexBlock: B };
      const padded = B > 0 ? Math.ceil(rows / B) * B : rows;
      const idxBytes = padded * vectors * stages;
      // two matrices in one record: indices of the first, of the second, then both matrices' row scales
      const recBytes = 48 + 2 * idxBytes + 4 * rows + 64;
      const rec = arena.u8(arena.alloc(recBytes, 4096), recBytes);
      for (let i = 0; i < 2 * idxBytes; i++) rec[48 + i] = rng.int(entries);
      const scaleA = 48 + 2 * idxBytes;
      const scaleB = scaleA + 2 * rows;
      for (let r = 0; r < 2 * rows; r++) {
        const h = encodeF16(rng.uniform(0.01, 0.2));
        rec[scaleA + 2 * r] = h & 0xff;
        rec[scaleA + 2 * r + 1] = h >> 8;
      }
      const booksA = randF32(stages * 8 * entries);
      const booksB = randF32(stages * 8 * entries);
      const x = randF32(vectors * 8, -2, 2);
      const n = vectors * stages * entries;
      const lutA = arena.allocF32(n), lutB = arena.allocF32(n), oneA = arena.allocF32(n), oneB = arena.allocF32(n);
      const yA = arena.allocF32(rows), yB = arena.allocF32(rows), oyA = arena.allocF32(rows), oyB = arena.allocF32(rows);
      on.w1.vqLut(booksA, stages, entries, 8, x, vectors * 8, oneA);
      on.w1.vqLut(booksB, stages, entries, 8, x, vectors * 8, oneB);
      on.w1.vqApply(rec, 48, scaleA, rows, vectors * 8, g, oneA, oyA);
      on.w1.vqApply(rec, 48 + idxBytes, scaleB, rows, vectors * 8, g, oneB, oyB);
      for (const [label, k] of [['ts', tsKernels], ['w1', on.w1], ['w2', on.w2], ['w3', on.w3]] as [string, Kernels][]) {
        lutA.fill(0), lutB.fill(0), yA.fill(0), yB.fill(0);
        k.vqLutPair(booksA, booksB, stages, entries, 8, x, vectors * 8, lutA, lutB);
        if (label !== 'ts') assert.ok(sameBits(lutA, oneA) && sameBits(lutB, oneB), `vqLutPair ${label} ${vectors} vectors [seed ${seed}]: not the bits of two vqLut calls`);
        else assert.ok(relErr(lutA, oneA) <= 2e-5 && relErr(lutB, oneB) <= 2e-5, `vqLutPair ts [seed ${seed}]`);
        k.vqApplyPair(rec, { idxOff: 48, scaleOff: scaleA, lut: oneA, y: yA }, { idxOff: 48 + idxBytes, scaleOff: scaleB, lut: oneB, y: yB }, rows, vectors * 8, g);
        if (label !== 'ts') assert.ok(sameBits(yA, oyA) && sameBits(yB, oyB), `vqApplyPair ${label} ${rows} rows B=${B} [seed ${seed}]: not the bits of two vqApply calls`);
        else assert.ok(relErr(yA, oyA) <= 2e-5 && relErr(yB, oyB) <= 2e-5, `vqApplyPair ts ${rows} rows [seed ${seed}]`);
      }
    }
  });

  it('kdaPrep, kdaStep, kdaOut', () => {
    for (const [H, D, K] of [[3, 13, 4], [1, 5, 3], [5, 16, 1], [2, 33, 2]]) {
      const C = H * D;
      const q = randF32(C, -2, 2);
      const k = randF32(C, -2, 2);
      const v = randF32(C, -2, 2);
      const taps = [randF32(C * K), randF32(C * K), randF32(C * K)] as [Float32Array, Float32Array, Float32Array];
      const ring = randF32(3 * C * (K - 1));
      const g = randF32(C, -3, 25);
      const dtBias = randF32(C);
      const aLog = randF32(H);
      const beta = randF32(H, -3, 3);
      compare(`kdaPrep ${H}×${D} K=${K}`, [q, k, v, g, beta, ring], (kk) => kk.kdaPrep({ q, k, v, taps, ring, C, K, g, dtBias, aLog, beta, H, D, l2eps: 1e-6 }), 1e-5);
      const S = randF32(H * D * D, -0.5, 0.5);
      const o = arena.allocF32(C);
      const gl = randF32(C, -2, 0);
      const b = randF32(H, 0, 1);
      compare(`kdaStep ${H}×${D}`, [S, o], (kk) => kk.kdaStep(H, D, q, k, v, gl, b, S, o), 1e-5);
      const gate = randF32(C, -3, 3);
      const w = randF32(D);
      compare(`kdaOut ${H}×${D}`, [o], (kk) => kk.kdaOut(o, gate, w, H, D, 1e-5));
    }
  });

  it('kdaPrep with the bounded decay gate (K3): lb·σ(exp(A)·z), not the softplus form', () => {
    for (const [H, D, K, lb] of [[3, 13, 4, -5], [2, 33, 2, -0.7]]) {
      const C = H * D;
      const q = randF32(C, -2, 2);
      const k = randF32(C, -2, 2);
      const v = randF32(C, -2, 2);
      const taps = [randF32(C * K), randF32(C * K), randF32(C * K)] as [Float32Array, Float32Array, Float32Array];
      const ring = randF32(3 * C * (K - 1));
      const g = randF32(C, -8, 8);
      const g0 = g.slice();
      const dtBias = randF32(C);
      const aLog = randF32(H, -1.5, 0.5);
      const beta = randF32(H, -3, 3);
      compare(`kdaPrep bounded ${H}×${D}`, [q, k, v, g, beta, ring], (kk) => kk.kdaPrep({ q, k, v, taps, ring, C, K, g, dtBias, aLog, beta, H, D, l2eps: 1e-6, lowerBound: lb }), 1e-5);
      // the formula itself, element by element, on the reference's output
      const g1 = g0.slice();
      tsKernels.kdaPrep({ q: q.slice(), k: k.slice(), v: v.slice(), taps, ring: ring.slice(), C, K, g: g1, dtBias, aLog, beta: beta.slice(), H, D, l2eps: 1e-6, lowerBound: lb });
      for (let i = 0; i < C; i++) {
        const z = g0[i] + dtBias[i];
        const want = lb / (1 + Math.exp(-Math.exp(aLog[Math.floor(i / D)]) * z));
        assert.ok(Math.abs(g1[i] - want) <= 1e-6 * Math.abs(lb), `g[${i}] = ${g1[i]}, want ${want}`);
        assert.ok(g1[i] > lb && g1[i] < 0);
      }
      const soft = g0.slice();
      tsKernels.kdaPrep({ q: q.slice(), k: k.slice(), v: v.slice(), taps, ring: ring.slice(), C, K, g: soft, dtBias, aLog, beta: beta.slice(), H, D, l2eps: 1e-6 });
      assert.ok(soft.some((x, i) => Math.abs(x - g1[i]) > 1e-3), 'the two gates are different functions');
    }
  });

  it('situMul: SiTU-GLU against its formula, saturated, and with no linear β', () => {
    const situ = (g: number, u: number, b: number, bl: number) => b * Math.tanh(g / b) * (1 / (1 + Math.exp(-g))) * (bl > 0 ? bl * Math.tanh(u / bl) : u);
    for (const [n, beta, lin] of [[513, 4, 25], [37, 3, 0], [8, 1, 2]]) {
      const a = randF32(n, -30, 30);
      const b = randF32(n, -60, 60);
      const a0 = a.slice();
      compare(`situMul n=${n} β=${beta} β_l=${lin}`, [a], (k) => k.situMul(a, b, n, beta, lin), 1e-6);
      const got = a0.slice();
      tsKernels.situMul(got, b, n, beta, lin);
      for (let i = 0; i < n; i++) assert.ok(Math.abs(got[i] - situ(a0[i], b[i], beta, lin)) <= 1e-5 * (1 + Math.abs(got[i])), `element ${i}`);
    }
  });

  it('sigmoidMul: a ⊙ σ(g)', () => {
    for (const n of [1, 7, 300]) {
      const a = randF32(n, -3, 3);
      const g = randF32(n, -10, 10);
      compare(`sigmoidMul n=${n}`, [a], (k) => k.sigmoidMul(a, g, n), 1e-6);
    }
  });

  it('attnRes: a softmax mix of 1 to 9 candidates by their normed scores, in order', () => {
    for (const [nb, H] of [[0, 5], [1, 96], [3, 17], [8, 130]]) {
      const blocks = randF32(Math.max(1, nb * H), -3, 3);
      const cur = randF32(H, -3, 3);
      const w = randF32(H, -0.5, 0.5);
      const out = arena.allocF32(H);
      compare(`attnRes ${nb + 1} candidates of ${H}`, [out], (k) => k.attnRes(blocks, nb, cur, w, H, 1e-5, out), 1e-6);
      // the definition, on the reference's output
      const cand = Array.from({ length: nb + 1 }, (_, i) => (i < nb ? blocks.subarray(i * H, (i + 1) * H) : cur));
      const sc = cand.map((v) => v.reduce((t, x, j) => t + x * w[j], 0) / Math.sqrt(v.reduce((t, x) => t + x * x, 0) / H + 1e-5));
      const mx = Math.max(...sc);
      const e = sc.map((x) => Math.exp(x - mx));
      const z = e.reduce((a, b) => a + b, 0);
      tsKernels.attnRes(blocks, nb, cur, w, H, 1e-5, out);
      for (let j = 0; j < H; j++) {
        const want = cand.reduce((t, v, i) => t + (e[i] / z) * v[j], 0);
        assert.ok(Math.abs(out[j] - want) <= 1e-5, `out[${j}] = ${out[j]}, want ${want}`);
      }
      if (nb === 0) assert.ok(sameBits(out, cur), 'one candidate: the mix is the candidate');
    }
  });

  for (const [fname, fmt] of FORMATS) {
    it(`mlaHeads with kv_b in ${fname}`, () => {
      for (const [heads, nope, rope, vh, kvl, n] of [[3, 7, 5, 9, 19, 1], [2, 16, 8, 16, 40, 30], [5, 3, 1, 2, 131, 7]]) {
        const kvB = randTensor(fmt, heads * (nope + vh), kvl);
        const q = randF32(heads * (nope + rope), -2, 2);
        const cache = randF32(n * (kvl + rope));
        const qLat = arena.allocF32(heads * kvl);
        const scores = arena.allocF32(heads * n);
        const ctx = arena.allocF32(heads * kvl);
        const o = arena.allocF32(heads * vh);
        compare(`mlaHeads ${fname} ${heads}h n=${n}`, [o, ctx], (k) => k.mlaHeads({ kvB, q, heads, nope, rope, vh, kvl, cache, n, scale: 0.3, qLat, scores, ctx, o }), 1e-5);
      }
    });
  }

  it('attend: causal attention over a key/value cache (GQA, rings, sinks)', () => {
    // [heads, kvHeads, headDim, lo, hi, slots, sinks]
    const cases: [number, number, number, number, number, number, boolean][] = [
      [4, 4, 16, 0, 0, 8, false], // MHA, the first position: the value itself
      [8, 2, 13, 0, 20, 32, false], // GQA, an awkward head size
      [6, 1, 32, 3, 40, 64, true], // MQA with sinks, a window that starts past 0
      [4, 2, 8, 15, 22, 8, true], // a ring of 8 slots holding positions 15..22
    ];
    for (const [H, KV, D, lo, hi, slots, withSinks] of cases) {
      const q = randF32(H * D, -2, 2);
      const k = randF32(slots * KV * D);
      const v = randF32(slots * KV * D);
      const sinks = withSinks ? randF32(H, -1, 3) : undefined;
      const scores = arena.allocF32(H * (hi - lo + 1));
      const out = arena.allocF32(H * D);
      const scale = 1 / Math.sqrt(D);
      compare(`attend ${H}/${KV}×${D} ${lo}..${hi} in ${slots}`, [out], (kk) => kk.attend({ q, k, v, slots, heads: H, kvHeads: KV, headDim: D, lo, hi, scale, sinks, scores, out }), 1e-5);
      // independently: every head by the definition, in float64
      const want = new Float64Array(H * D);
      for (let h = 0; h < H; h++) {
        const g = Math.floor((h * KV) / H);
        const w: number[] = [];
        for (let j = lo; j <= hi; j++) {
          let dot = 0;
          for (let d = 0; d < D; d++) dot += q[h * D + d] * k[((j % slots) * KV + g) * D + d];
          w.push(dot * scale);
        }
        const m = Math.max(...w, sinks ? sinks[h] : -Infinity);
        const e = w.map((x) => Math.exp(x - m));
        const z = e.reduce((a, b) => a + b, 0) + (sinks ? Math.exp(sinks[h] - m) : 0);
        for (let d = 0; d < D; d++) for (let j = lo; j <= hi; j++) want[h * D + d] += (e[j - lo] / z) * v[((j % slots) * KV + g) * D + d];
      }
      on.w1.attend({ q, k, v, slots, heads: H, kvHeads: KV, headDim: D, lo, hi, scale, sinks, scores, out });
      assert.ok(relErr(out, Float32Array.from(want)) < 1e-5, `attend ${H}/${KV}×${D} [seed ${seed}]: ${relErr(out, Float32Array.from(want))} from the definition`);
      if (lo === hi && !withSinks) for (let h = 0; h < H; h++) for (let d = 0; d < D; d++) assert.equal(out[h * D + d], v[((lo % slots) * KV + Math.floor((h * KV) / H)) * D + d], 'one position: its value exactly');
    }
  });

  it('moeRoute and moeCombine', () => {
    for (const [E, K] of [[37, 5], [8, 1], [3, 3]]) {
      const logits = randF32(E, -4, 4);
      const bias = randF32(E, -0.1, 0.1);
      const idOff = arena.alloc(4 * K, 64);
      const w = arena.allocF32(K);
      for (const renorm of [true, false]) {
        const ids = arena.i32(idOff, K);
        const seen: Int32Array[] = [];
        compare(`moeRoute E=${E} K=${K}`, [logits, w], (k) => {
          k.moeRoute(logits, bias, E, K, ids, w, renorm, 2.446);
          seen.push(ids.slice());
        });
        for (const s of seen) assert.deepEqual([...s], [...seen[0]], 'the same experts are chosen');
        assert.equal(new Set(seen[0]).size, K);
      }
      const H = 101;
      const eo = randF32(K * H);
      const shared = randF32(H);
      const out = arena.allocF32(H);
      compare(`moeCombine K=${K}`, [out], (k) => k.moeCombine(out, eo, w, K, H, shared));
      compare(`moeCombine K=${K} no shared`, [out], (k) => k.moeCombine(out, eo, w, K, H));
    }
  });

  it('refuses buffers from another arena', () => {
    const other = new Arena(1 << 20);
    const w = randTensor(Fmt.F32, 4, 4);
    const X = other.allocF32(4);
    assert.throws(() => on.w1.matmul(w, X, arena.allocF32(4), 1), /kernel buffer X is in arena \d+, the call runs in arena \d+/);
  });
});

describe('kernels: k-means building blocks for the converter', () => {
  /** Brute force in float64: nearest centroid (lowest index on a tie) and its squared distance. */
  function nearest(X: Float32Array, C: Float32Array, n: number, entries: number, dim: number): { idx: number[]; dist: number[] } {
    const idx: number[] = [];
    const dist: number[] = [];
    for (let r = 0; r < n; r++) {
      let best = -1;
      let bestD = Infinity;
      for (let e = 0; e < entries; e++) {
        let d = 0;
        for (let j = 0; j < dim; j++) d += (X[r * dim + j] - C[e * dim + j]) ** 2;
        if (d < bestD) {
          bestD = d;
          best = e;
        }
      }
      idx.push(best);
      dist.push(bestD);
    }
    return { idx, dist };
  }

  for (const [dim, entries, n] of [
    [8, 256, 1001],
    [8, 12, 77],
    [5, 7, 300],
    [3, 4, 65],
  ]) {
    it(`vqNearest: dim ${dim}, ${entries} entries, ${n} vectors — the nearest centroid, the same bits on 1–3 threads`, () => {
      const X = randF32(n * dim);
      const C = randF32(entries * dim);
      const CT = arena.allocF32(dim * entries);
      const cn = arena.allocF32(entries);
      for (let e = 0; e < entries; e++)
        for (let j = 0; j < dim; j++) {
          CT[j * entries + e] = C[e * dim + j];
          cn[e] += C[e * dim + j] ** 2;
        }
      const ref = nearest(X, C, n, entries, dim);
      const results = [on.w1, on.w2, on.w3].map((k) => {
        const idx = arena.i32(arena.alloc(n * 4, 64), n);
        const bytes = arena.u8(arena.alloc(n, 64), n);
        const dist = arena.allocF32(n);
        k.vqNearest(X, CT, cn, entries, dim, idx, n, dist);
        k.vqNearest(X, CT, cn, entries, dim, bytes, n);
        assert.deepEqual([...bytes], [...idx].map((i) => i & 0xff));
        return { idx, dist };
      });
      let mismatched = 0;
      for (let r = 0; r < n; r++) {
        const got = results[0].idx[r];
        // f32 arithmetic may pick a different centroid only when two are within rounding of each other
        if (got !== ref.idx[r]) {
          mismatched++;
          let d = 0;
          for (let j = 0; j < dim; j++) d += (X[r * dim + j] - C[got * dim + j]) ** 2;
          assert.ok(d - ref.dist[r] < 1e-5, `vector ${r}: centroid ${got} at ${d}, the nearest is ${ref.idx[r]} at ${ref.dist[r]}`);
        }
        assert.ok(Math.abs(results[0].dist[r] - ref.dist[r]) < 1e-4 * (1 + ref.dist[r]), `distance of vector ${r}`);
      }
      assert.ok(mismatched <= n / 100, `${mismatched} near-ties of ${n}`);
      for (const other of results.slice(1)) {
        assert.deepEqual([...other.idx], [...results[0].idx]);
        assert.ok(sameBits(other.dist, results[0].dist));
      }
    });
  }

  for (const dim of [8, 5]) {
    it(`distUpdate (dim ${dim}): the running minimum squared distance, the same bits on 1–3 threads`, () => {
      const n = 513;
      const X = randF32(n * dim);
      const c = randF32(dim);
      const start = randF32(n, 0, 4);
      const outs = [on.w1, on.w2, on.w3].map((k) => {
        const dmin = arena.allocF32(n);
        dmin.set(start);
        k.distUpdate(X, c, dim, dmin, n);
        return dmin;
      });
      for (let r = 0; r < n; r++) {
        let d = 0;
        for (let j = 0; j < dim; j++) d += (X[r * dim + j] - c[j]) ** 2;
        const want = Math.min(start[r], d);
        assert.ok(Math.abs(outs[0][r] - want) <= 1e-5 * (1 + want), `vector ${r}: ${outs[0][r]} vs ${want}`);
      }
      assert.ok(sameBits(outs[1], outs[0]) && sameBits(outs[2], outs[0]));
    });
  }
});

describe('the kernel pool cuts a call into chunks', () => {
  it('that cover every row once, none empty, each starting on the alignment, however many threads take them', async () => {
    const { C, chunkCount, takeChunks } = await import('../src/kernels/wasm/pool.js');
    for (const [n, parts, align] of [[1, 2, 1], [7, 2, 1], [16, 2, 1], [1000, 3, 64], [64, 2, 64], [65, 2, 64], [4096, 2, 4], [5, 3, 8], [33, 3, 32]]) {
      const ctrl = new Int32Array(C.SIZE);
      ctrl[C.N] = n;
      ctrl[C.ALIGN] = align;
      ctrl[C.CHUNKS] = chunkCount('mm16', n, align, parts);
      assert.equal(ctrl[C.CHUNKS], Math.min(Math.ceil(n / align), 4 * parts), `${n} rows: four chunks a thread where the rows allow`);
      const seen = new Uint8Array(n);
      const by = [0, 0];
      const take = (who: number) => (b: number, e: number) => {
        assert.ok(b % align === 0 && e > b && e <= n, `chunk [${b}, ${e}) of ${n} rows, aligned to ${align}`);
        for (let r = b; r < e; r++) seen[r]++;
        by[who]++;
        // while the first thread is in its first chunk, a second one takes all the rest
        if (who === 0 && by[0] === 1) takeChunks(ctrl, take(1));
      };
      takeChunks(ctrl, take(0));
      assert.deepEqual([...new Set(seen)], [1], `every one of ${n} rows exactly once`);
      assert.equal(by[0] + by[1], ctrl[C.CHUNKS], 'every chunk taken, none empty');
      assert.equal(by[0], 1, 'the first thread found nothing left after its chunk');
      // a helper waking after the call's chunks are gone takes none
      takeChunks(ctrl, () => assert.fail('a chunk taken twice'));
    }
    assert.equal(chunkCount('mla_heads', 32, 1, 2), 2, "MLA's heads: one chunk a thread (each chunk reads the whole latent cache)");
  });

  it('and a product split over 2 and 3 threads, twice in a row, has the bits of one thread', async () => {
    const { KernelPool } = await import('../src/kernels/wasm/pool.js');
    let pooled = 0;
    const run = KernelPool.prototype.run;
    KernelPool.prototype.run = function (this: import('../src/kernels/wasm/pool.js').KernelPool, ...a: Parameters<typeof run>) {
      pooled++;
      return run.apply(this, a);
    };
    try {
      for (const fmt of [Fmt.Q8G, Fmt.Q4G]) {
        // big enough that the call goes to the pool even when the helpers sleep
        const w = randTensor(fmt, 2051, 1100);
        const X = randF32(1100);
        const want = arena.allocF32(2051);
        on.w1.matmul(w, X, want, 1);
        for (const [label, k] of [['w2', on.w2], ['w3', on.w3]] as const) {
          for (let rep = 0; rep < 2; rep++) {
            const Y = arena.allocF32(2051);
            const before = pooled;
            k.matmul(w, X, Y, 1);
            assert.ok(pooled > before, `${label}: the product went to the pool`);
            assert.ok(sameBits(Y, want), `fmt ${fmt} ${label} call ${rep + 1} [seed ${seed}]: not the bits of one thread`);
          }
        }
      }
    } finally {
      KernelPool.prototype.run = run;
    }
  });
});
