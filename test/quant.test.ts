import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Fmt } from '../src/container/format.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import { Arena } from '../src/memory/arena.js';
import { quantizeRows, roundHalfEven } from '../src/quant/trunk.js';
import { encodeResidual, normalizeRows, trainResidual, vqWorkspace } from '../src/quant/vq.js';
import { decodeF16 } from '../src/util/f16.js';
import { Rng } from '../src/util/prng.js';

describe('trunk quantization (Q8G, Q4G)', () => {
  it('rounds half to even, and every value lands within half a step of its group scale', () => {
    assert.deepEqual([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999, -2.5001].map(roundHalfEven), [0, 2, 2, -0, -2, 2, -3]);
    const rng = new Rng(5);
    const rows = 7;
    const cols = 300; // two whole groups of 128 and a padded one
    const x = new Float32Array(rows * cols).map(() => rng.uniform(-3, 3));
    for (const fmt of [Fmt.Q8G, Fmt.Q4G] as const) {
      const { payload, scales } = quantizeRows(fmt, x, rows, cols);
      const groups = 3;
      const rowBytes = fmt === Fmt.Q8G ? groups * 128 : groups * 64;
      assert.equal(payload.length, rows * rowBytes);
      for (let r = 0; r < rows; r++)
        for (let c = 0; c < groups * 128; c++) {
          const s = decodeF16(scales[r * groups + (c >> 7)]);
          const q = fmt === Fmt.Q8G ? (payload[r * rowBytes + c] << 24) >> 24 : ((payload[r * rowBytes + (c >> 1)] >> (c & 1 ? 4 : 0)) & 15) - 8;
          if (c >= cols) assert.equal(q, 0, 'padding is zero');
          else assert.ok(Math.abs(q * s - x[r * cols + c]) <= s / 2 + 1e-6, `${fmt} r${r} c${c}`);
        }
    }
  });

  it('a non-finite value is named by row and column', () => {
    const x = new Float32Array(2 * 128).fill(0.5);
    x[128 + 9] = NaN;
    assert.throws(() => quantizeRows(Fmt.Q4G, x, 2, 128, 128, 'w'), /w holds a non-finite value at row 1, column 9/);
  });
});

describe('residual vector quantization (the converter\'s codebooks)', () => {
  const arena = new Arena(32 << 20);
  let k: WasmKernels;
  before(async () => {
    k = await WasmKernels.create(2, [arena]);
  });
  after(() => k.close());
  const q = { name: 'VQ3R', stages: 3, vecDim: 8, entries: 256, indexBlock: 64, indexBits: 8 };

  it('each stage removes error; the same seed gives the same codebooks and codes', async () => {
    const rows = 64;
    const cols = 256;
    const rng = new Rng(9);
    const W = new Float32Array(rows * cols).map(() => rng.uniform(-1, 1) * rng.uniform(0, 1));
    const n = (rows * cols) / 8;
    const run = async () => {
      const ws = vqWorkspace(k, arena, q);
      const X = arena.allocF32(n * 8);
      const scales = normalizeRows(W, rows, cols, X);
      const sample = arena.allocF32(n * 8);
      sample.set(X);
      const scratch = { idx: arena.i32(arena.alloc(n * 4, 64), n), dist: arena.allocF32(n) };
      const books = await trainResidual(ws, sample, n, new Rng(1), 8, scratch);
      const codes = new Uint8Array(n * 3);
      await encodeResidual(ws, X, n, books, arena.u8(arena.alloc(n, 64), n), codes);
      return { books, codes, scales };
    };
    const a = await run();
    const b = await run();
    assert.deepEqual(a.codes, b.codes);
    for (let s = 0; s < 3; s++) assert.deepEqual(a.books[s], b.books[s]);
    // reconstruct with 1, 2 and 3 stages: the error falls at each
    const errs = [1, 2, 3].map((stages) => {
      let num = 0;
      let den = 0;
      for (let v = 0; v < n; v++) {
        const r = Math.floor((v * 8) / cols);
        const s = decodeF16(a.scales[r]);
        for (let d = 0; d < 8; d++) {
          let w = 0;
          for (let st = 0; st < stages; st++) w += a.books[st][a.codes[v * 3 + st] * 8 + d];
          num += (w * s - W[v * 8 + d]) ** 2;
          den += W[v * 8 + d] ** 2;
        }
      }
      return Math.sqrt(num / den);
    });
    assert.ok(errs[0] < 0.8 && errs[1] < errs[0] * 0.7 && errs[2] < errs[1] * 0.7, `relative error by stages: ${errs}`);
  });
});
