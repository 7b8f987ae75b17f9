/**
 * The many-token VQ kernels (one expert record applied to several tokens' tables in one pass over
 * its indices) give each token exactly the bits of its own vqApply / vqApplyPair call, on 1–3
 * threads, in both activation modes, for the shapes the blocked fast path and its fallbacks take.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { tsKernels } from '../src/kernels/ts/index.js';
import { type Kernels, MAX_VQ_MANY, type VqGeometry } from '../src/kernels/types.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import { Arena } from '../src/memory/arena.js';
import { encodeF16 } from '../src/util/f16.js';
import { Rng } from '../src/util/prng.js';
import { sameBits } from './helpers.js';
import { WasteError } from '../src/util/errors.js';

const arena = new Arena(256 << 20);
const seed = Number(process.env.WASTE_TEST_SEED ?? new Rng(Date.now() >>> 0).u32());
const rng = new Rng(seed);
let kernels: [string, Kernels][] = [];
let one: WasmKernels;

before(async () => {
  one = await WasmKernels.create(1, [arena]);
  kernels = [['ts', tsKernels]];
  for (const activations of ['exact', 'a16'] as const)
    for (const n of [1, 2, 3]) kernels.push([`${n} thread${n > 1 ? 's' : ''} ${activations}`, await WasmKernels.create(n, [arena], { activations })]);
});
after(async () => {
  await one.close();
  for (const [, k] of kernels) if (k instanceof WasmKernels) await k.close();
});

function randF32(n: number, lo = -1, hi = 1): Float32Array {
  const a = arena.allocF32(n);
  for (let i = 0; i < n; i++) a[i] = rng.uniform(lo, hi);
  return a;
}

/** A record of two matrices of `rows` × `vectors` vectors: indices of each, then both matrices' f16 row scales. */
function record(rows: number, vectors: number, g: VqGeometry) {
  const padded = g.indexBlock > 0 ? Math.ceil(rows / g.indexBlock) * g.indexBlock : rows;
  const idxBytes = padded * vectors * g.stages;
  const bytes = 48 + 2 * idxBytes + 4 * rows + 64;
  const rec = arena.u8(arena.alloc(bytes, 4096), bytes);
  for (let i = 0; i < 2 * idxBytes; i++) rec[48 + i] = rng.int(g.entries);
  const scaleA = 48 + 2 * idxBytes;
  for (let r = 0; r < 2 * rows; r++) {
    const h = encodeF16(rng.uniform(0.01, 0.2));
    rec[scaleA + 2 * r] = h & 0xff;
    rec[scaleA + 2 * r + 1] = h >> 8;
  }
  return { rec, a: { idxOff: 48, scaleOff: scaleA }, b: { idxOff: 48 + idxBytes, scaleOff: scaleA + 2 * rows } };
}

describe('many-token VQ kernels: each token the bits of its own call', () => {
  // [rows, vectors, stages, entries, index block, tokens]: the blocked 3-stage path with a row tail
  // and a partial block, a single row, other stage counts, row-major indices, an odd block, and the
  // Kimi-Linear widths (1024 rows of 288 vectors) with a full batch of tokens
  const shapes = [[130, 37, 3, 256, 64, 3], [1, 5, 3, 256, 64, 2], [67, 9, 2, 50, 64, 4], [45, 13, 3, 256, 0, 3], [100, 7, 3, 256, 7, 5], [1024, 288, 3, 256, 64, 4], [70, 6, 3, 256, 64, 1], [64, 4, 3, 256, 64, MAX_VQ_MANY]];
  for (const [rows, vectors, stages, entries, B, n] of shapes)
    it(`${rows} rows × ${vectors} vectors, ${stages} stages of ${entries}, block ${B}, ${n} tokens`, () => {
      const g: VqGeometry = { stages, entries, vecDim: 8, indexBlock: B };
      const { rec, a, b } = record(rows, vectors, g);
      const size = vectors * stages * entries;
      const lutsA = Array.from({ length: n }, () => randF32(size, -2, 2));
      const lutsB = Array.from({ length: n }, () => randF32(size, -2, 2));
      // what one call per token gives (one thread)
      const wantA = lutsA.map((lut) => {
        const y = arena.allocF32(rows);
        one.vqApply(rec, a.idxOff, a.scaleOff, rows, vectors * 8, g, lut, y);
        return y;
      });
      const wantB = lutsB.map((lut) => {
        const y = arena.allocF32(rows);
        one.vqApply(rec, b.idxOff, b.scaleOff, rows, vectors * 8, g, lut, y);
        return y;
      });
      const ysA = lutsA.map(() => arena.allocF32(rows));
      const ysB = lutsB.map(() => arena.allocF32(rows));
      for (const [label, k] of kernels) {
        if (label === 'ts' && rows * vectors * n > 200_000) continue;
        for (const y of [...ysA, ...ysB]) y.fill(NaN);
        k.vqApplyMany(rec, { ...a, luts: lutsA, ys: ysA }, rows, vectors * 8, g);
        ysA.forEach((y, i) => assert.ok(label === 'ts' ? y.every((v, r) => Math.abs(v - wantA[i][r]) <= 1e-4 * (1 + Math.abs(v))) : sameBits(y, wantA[i]), `vqApplyMany ${label}, token ${i} [seed ${seed}]`));
        for (const y of ysA) y.fill(NaN);
        k.vqApplyPairMany(rec, { ...a, luts: lutsA, ys: ysA }, { ...b, luts: lutsB, ys: ysB }, rows, vectors * 8, g);
        ysA.forEach((y, i) => assert.ok(label === 'ts' ? y.every((v, r) => Math.abs(v - wantA[i][r]) <= 1e-4 * (1 + Math.abs(v))) : sameBits(y, wantA[i]), `vqApplyPairMany ${label}, gate of token ${i} [seed ${seed}]`));
        ysB.forEach((y, i) => assert.ok(label === 'ts' ? y.every((v, r) => Math.abs(v - wantB[i][r]) <= 1e-4 * (1 + Math.abs(v))) : sameBits(y, wantB[i]), `vqApplyPairMany ${label}, up of token ${i} [seed ${seed}]`));
      }
    });

  it('refuses more tokens than its descriptors hold, and tables without outputs', () => {
    const g: VqGeometry = { stages: 3, entries: 256, vecDim: 8, indexBlock: 64 };
    const { rec, a } = record(8, 2, g);
    const lut = randF32(2 * 3 * 256);
    const y = arena.allocF32(8);
    for (const [, k] of kernels) {
      assert.throws(() => k.vqApplyMany(rec, { ...a, luts: new Array(MAX_VQ_MANY + 1).fill(lut), ys: new Array(MAX_VQ_MANY + 1).fill(y) }, 8, 16, g), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG');
      assert.throws(() => k.vqApplyMany(rec, { ...a, luts: [lut, lut], ys: [y] }, 8, 16, g), (e: unknown) => e instanceof WasteError && e.code === 'E_ARG');
    }
  });
});
