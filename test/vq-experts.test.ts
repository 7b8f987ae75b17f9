import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { tsKernels } from '../src/kernels/ts/index.js';
import type { GatedActivation, Kernels, VqExpertJob, VqExpertShape, VqGeometry } from '../src/kernels/types.js';
import { WasmKernels } from '../src/kernels/wasm/index.js';
import { ARENA_RESERVED, Arena } from '../src/memory/arena.js';
import { MemoryBudget } from '../src/memory/budget.js';
import { decodeF16, encodeF16 } from '../src/util/f16.js';
import { Rng } from '../src/util/prng.js';
import { kernelsOn1To3Threads, relErr, sameBits, testSeed } from './helpers.js';

/**
 * vqExperts (whole routed experts as jobs, split between threads by expert) against the
 * expert-by-expert calls the MoE block made before it: bit-identical on 1, 2 and 3 threads, for
 * fewer jobs than threads, more than one call's descriptors hold, both activations, and an arena
 * whose budget has no room for its working rows (it must then compute nothing and say so).
 */
const arena = new Arena(96 << 20);
const seed = testSeed('vqExperts');
const rng = new Rng(seed);
const on = kernelsOn1To3Threads(arena);

function randF32(a: Arena, n: number, lo = -1, hi = 1): Float32Array {
  const v = a.allocF32(n);
  for (let i = 0; i < n; i++) v[i] = rng.uniform(lo, hi);
  return v;
}

/** A record laid out as the containers' are: gate, up, down indices (blocked by B rows), then the three matrices' f16 row scales. */
function randRecord(a: Arena, I: number, W: number, g: VqGeometry): { rec: Uint8Array; shape: Omit<VqExpertShape, 'booksDown' | 'act'> } {
  const pad = (r: number) => (g.indexBlock > 0 ? Math.ceil(r / g.indexBlock) * g.indexBlock : r);
  const gateBytes = pad(I) * (W / g.vecDim) * g.stages;
  const downBytes = pad(W) * (I / g.vecDim) * g.stages;
  const gateOff = 48;
  const upOff = gateOff + gateBytes;
  const downOff = upOff + gateBytes;
  const scaleOff = downOff + downBytes;
  const bytes = scaleOff + 2 * (2 * I + W) + 64;
  const rec = a.u8(a.alloc(bytes, 4096), bytes);
  for (let i = gateOff; i < scaleOff; i++) rec[i] = rng.int(g.entries);
  for (let r = 0; r < 2 * I + W; r++) {
    const h = encodeF16(rng.uniform(0.01, 0.2));
    rec[scaleOff + 2 * r] = h & 0xff;
    rec[scaleOff + 2 * r + 1] = h >> 8;
  }
  // a decode step of 8 experts: calls with more jobs take them in steps
  return { rec, shape: { gateOff, upOff, downOff, scaleOff, inter: I, width: W, g, topK: 8 } };
}

/** A Kimi-Linear-sized expert (1024 × 2304) in arena `a`: its record, the shape a call takes, and random gate/up tables on demand. */
function klExpert(a: Arena) {
  const g: VqGeometry = { stages: 3, entries: 256, vecDim: 8, indexBlock: 64 };
  const I = 1024;
  const W = 2304;
  const { rec, shape } = randRecord(a, I, W, g);
  const lutSize = (W / g.vecDim) * g.stages * g.entries;
  const x: VqExpertShape = { ...shape, booksDown: randF32(a, g.stages * g.vecDim * g.entries), act: { kind: 'silu' } };
  return { rec, x, W, tables: (): [Float32Array, Float32Array] => [randF32(a, lutSize, -0.3, 0.3), randF32(a, lutSize, -0.3, 0.3)] };
}

/** The expert-by-expert form (the MoE block's `expert`): gate and up as a pair, the activation, the down table, down. */
function byExpert(k: Kernels, job: VqExpertJob, x: VqExpertShape, a: Arena): void {
  const { inter: I, width: W, g } = x;
  const ffA = a.allocF32(I);
  const ffB = a.allocF32(I);
  const lutD = a.allocF32((I / g.vecDim) * g.stages * g.entries);
  k.vqApplyPair(job.rec, { idxOff: x.gateOff, scaleOff: x.scaleOff, lut: job.lutGate, y: ffA }, { idxOff: x.upOff, scaleOff: x.scaleOff + 2 * I, lut: job.lutUp, y: ffB }, I, W, g);
  if (x.act.kind === 'silu') k.siluMul(ffA, ffB, I);
  else k.situMul(ffA, ffB, I, x.act.beta, x.act.linearBeta);
  k.vqLut(x.booksDown, g.stages, g.entries, g.vecDim, ffA, I, lutD);
  k.vqApply(job.rec, x.downOff, x.scaleOff + 4 * I, W, I, g, lutD, job.y);
}

describe(`vqExperts [seed ${seed}]`, () => {
  const cases: [number, number, VqGeometry, number, GatedActivation][] = [
    [1024, 2304, { stages: 3, entries: 256, vecDim: 8, indexBlock: 64 }, 8, { kind: 'silu' }],
    [96, 72, { stages: 3, entries: 256, vecDim: 8, indexBlock: 64 }, 1, { kind: 'silu' }],
    [96, 72, { stages: 3, entries: 256, vecDim: 8, indexBlock: 64 }, 2, { kind: 'situ', beta: 1.5, linearBeta: 0 }],
    [80, 136, { stages: 2, entries: 50, vecDim: 8, indexBlock: 16 }, 5, { kind: 'situ', beta: 2, linearBeta: 3 }],
    [64, 48, { stages: 3, entries: 256, vecDim: 8, indexBlock: 0 }, 70, { kind: 'silu' }],
  ];
  for (const [I, W, g, n, act] of cases) {
    it(`${n} experts of ${I} × ${W}, ${g.stages} stages × ${g.entries}, B = ${g.indexBlock}, ${act.kind}: the bits of expert-by-expert calls on 1–3 threads`, () => {
      const lutSize = (W / g.vecDim) * g.stages * g.entries;
      const booksDown = randF32(arena, g.stages * g.vecDim * g.entries);
      // two tokens' tables, used alternately, and a few distinct records
      const tables = [0, 1].map(() => [randF32(arena, lutSize, -0.3, 0.3), randF32(arena, lutSize, -0.3, 0.3)]);
      const recs = [0, 1, 2].map(() => randRecord(arena, I, W, g));
      const shape: VqExpertShape = { ...recs[0].shape, booksDown, act };
      const jobs = (label: string) =>
        Array.from({ length: n }, (_, j): VqExpertJob => ({ rec: recs[j % 3].rec, lutGate: tables[j % 2][0], lutUp: tables[j % 2][1], y: arena.allocF32(W).fill(label === 'ref' ? 0 : NaN) }));
      const ref = jobs('ref');
      for (const job of ref) byExpert(on.w1, job, shape, arena);
      for (const [label, k] of [['w1', on.w1], ['w2', on.w2], ['w3', on.w3], ['ts', tsKernels]] as [string, Kernels][]) {
        const got = jobs(label);
        assert.equal(k.vqExperts(got, shape), true, `${label}: computed`);
        got.forEach((job, j) => {
          if (label === 'ts') assert.ok(relErr(job.y, ref[j].y) <= 1e-4, `ts job ${j}: ${relErr(job.y, ref[j].y)}`);
          else assert.ok(sameBits(job.y, ref[j].y), `${label} job ${j} of ${n}: not the bits of the expert-by-expert calls`);
        });
      }
    });
  }

  it('vqApply over tables wider than one pass holds: the bits of the f32 sums in vector order, on 1–3 threads', () => {
    const f = Math.fround;
    for (const [rows, vectors, stages, B] of [[130, 700, 3, 64], [70, 450, 2, 16]]) {
      const g: VqGeometry = { stages, entries: 256, vecDim: 8, indexBlock: B };
      const padded = Math.ceil(rows / B) * B;
      const idxBytes = padded * vectors * stages;
      const bytes = 48 + idxBytes + 2 * rows + 64;
      const rec = arena.u8(arena.alloc(bytes, 4096), bytes);
      for (let i = 48; i < 48 + idxBytes; i++) rec[i] = rng.int(256);
      const scaleOff = 48 + idxBytes;
      for (let r = 0; r < rows; r++) {
        const h = encodeF16(rng.uniform(0.01, 0.2));
        rec[scaleOff + 2 * r] = h & 0xff;
        rec[scaleOff + 2 * r + 1] = h >> 8;
      }
      const lut = randF32(arena, vectors * stages * 256);
      // the kernel's arithmetic: per vector the stages summed in order, added to the row's f32 sum, scaled at the end
      const want = new Float32Array(rows);
      for (let r = 0; r < rows; r++) {
        const blk = Math.floor(r / B);
        let acc = 0;
        for (let v = 0; v < vectors; v++) {
          const o = 48 + ((blk * vectors + v) * B + (r - blk * B)) * stages;
          let t = lut[v * stages * 256 + rec[o]];
          for (let st = 1; st < stages; st++) t = f(t + lut[(v * stages + st) * 256 + rec[o + st]]);
          acc = f(acc + t);
        }
        want[r] = f(acc * decodeF16(rec[scaleOff + 2 * r] | (rec[scaleOff + 2 * r + 1] << 8)));
      }
      for (const [label, k] of [['w1', on.w1], ['w2', on.w2], ['w3', on.w3]] as [string, Kernels][]) {
        const y = arena.allocF32(rows);
        k.vqApply(rec, 48, scaleOff, rows, vectors * 8, g, lut, y);
        assert.ok(sameBits(y, want), `${label}: ${rows} rows × ${vectors} vectors, ${stages} stages: not the bits of one pass`);
      }
    }
  });

  it('working rows that make the arena grow: the same bits, fewer jobs than threads and as many', async () => {
    for (const n of [1, 2]) {
      const small = new Arena(5 << 20);
      const k = await WasmKernels.create(2, [small]);
      try {
        const { rec, x, W, tables } = klExpert(small);
        const [lutGate, lutUp] = tables();
        const jobs = Array.from({ length: n }, () => ({ rec, lutGate, lutUp, y: new Float32Array(W) }));
        const before = small.memory.buffer.byteLength;
        assert.equal(k.vqExperts(jobs, x), true);
        assert.ok(small.memory.buffer.byteLength > before, 'the arena grew for the working rows');
        const want = small.allocF32(W);
        byExpert(k, { rec, lutGate, lutUp, y: want }, x, small);
        for (const job of jobs) assert.ok(sameBits(job.y, want), `${n} job(s) on 2 threads after growing`);
      } finally {
        await k.close();
      }
    }
  });

  it('more jobs than a decode step brings: taken in steps of the rows set aside for one, the same bits, nothing more allocated', async () => {
    const budget = new MemoryBudget(64 << 20);
    const arena8 = new Arena(8 << 20, budget);
    const k = await WasmKernels.create(2, [arena8]);
    try {
      const e = klExpert(arena8);
      const { rec, x, W } = e;
      const tables = [e.tables(), e.tables()];
      const want = tables.map(([lutGate, lutUp]) => {
        const y = arena8.allocF32(W);
        byExpert(k, { rec, lutGate, lutUp, y }, x, arena8);
        return y;
      });
      // a decode step's call sets the working rows up ...
      const first = Array.from({ length: 2 }, (_, j) => ({ rec, lutGate: tables[j][0], lutUp: tables[j][1], y: new Float32Array(W) }));
      assert.equal(k.vqExperts(first, x), true);
      // ... and a batched step's 40 jobs run through them: an arena only grows, so rows sized for
      // each larger call would be left behind, outside the memory plan
      const used = budget.used;
      const jobs = Array.from({ length: 40 }, (_, j) => ({ rec, lutGate: tables[j % 2][0], lutUp: tables[j % 2][1], y: new Float32Array(W).fill(NaN) }));
      assert.equal(k.vqExperts(jobs, x), true);
      assert.equal(budget.used, used, 'no more working rows allocated');
      jobs.forEach((job, j) => assert.ok(sameBits(job.y, want[j % 2]), `job ${j} of 40`));
    } finally {
      await k.close();
    }
  });

  it('an arena whose budget has no room for the working rows: false, nothing written', async () => {
    // a budget of exactly the arena's first pages: it may not grow
    const cap = 8 << 20;
    const tight = new Arena(cap, new MemoryBudget(Math.ceil((ARENA_RESERVED + cap) / 65536) * 65536));
    const k = await WasmKernels.create(2, [tight]);
    try {
      const g: VqGeometry = { stages: 3, entries: 256, vecDim: 8, indexBlock: 64 };
      const I = 1024;
      const W = 2304;
      const { rec, shape } = randRecord(tight, I, W, g);
      const lutSize = (W / g.vecDim) * g.stages * g.entries;
      const job = { rec, lutGate: randF32(tight, lutSize), lutUp: randF32(tight, lutSize), y: new Float32Array(W).fill(7) };
      const booksDown = randF32(tight, g.stages * g.vecDim * g.entries);
      // take what is left of the arena, so the working rows would need more than the budget allows
      for (;;) {
        try {
          tight.alloc(65536);
        } catch (e) {
          assert.match((e as Error).message, /budget/);
          break;
        }
      }
      assert.equal(k.vqExperts([job, job], { ...shape, booksDown, act: { kind: 'silu' } }), false);
      assert.ok(job.y.every((v) => v === 7));
    } finally {
      await k.close();
    }
  });
});
