import * as fs from 'node:fs';
import type { CheckpointWeights } from '../checkpoint/weights.js';
import type { ExpertQuant, RecordLayout } from '../container/format.js';
import { encodeCodebooks, encodeExpertRecord } from '../container/write.js';
import type { WasmKernels } from '../kernels/wasm/index.js';
import type { Arena } from '../memory/arena.js';
import { type VqWorkspace, encodeResidual, normalizeRows, trainResidual, vqWorkspace } from '../quant/vq.js';
import { WasteError, fromSystemError } from '../util/errors.js';
import { encodeF16 } from '../util/f16.js';
import { Rng, deriveSeed } from '../util/prng.js';
import type { ConvertPlan, ConvertSettings, LayerPlan } from './plan.js';

/**
 * One MoE layer of the conversion: train its codebooks (per matrix kind, residual k-means on
 * vectors sampled from a spread of experts), then encode every expert against them into 4 KiB
 * records. Buffers are allocated once and reused layer after layer; the nearest-centroid searches
 * run in the WebAssembly kernels over the worker pool.
 */
export class ExpertEncoder {
  private readonly ws: VqWorkspace;
  /** Training sample [trainVectors][dim] and its per-vector scratch. */
  private readonly sample: Float32Array;
  private readonly idx: Int32Array;
  private readonly dist: Float32Array;
  /** One matrix, row-normalized, as vectors; and its codes for one stage. */
  private readonly vectors: Float32Array;
  private readonly stageCodes: Uint8Array;
  /** Host-side: the source matrix, each matrix's codes and row scales, the record. */
  private readonly W: Float32Array;
  private readonly codes: [Uint8Array, Uint8Array, Uint8Array];
  private readonly record: Uint8Array;

  constructor(
    kernels: WasmKernels,
    arena: Arena,
    private readonly st: CheckpointWeights,
    private readonly q: ExpertQuant,
    private readonly layout: RecordLayout,
    private readonly settings: ConvertSettings,
    private readonly expertTensor: ConvertPlan['expertTensor'],
  ) {
    this.ws = vqWorkspace(kernels, arena, q);
    const n = settings.trainVectors;
    this.sample = arena.allocF32(n * q.vecDim);
    this.idx = arena.i32(arena.alloc(n * 4, 64), n);
    this.dist = arena.allocF32(n);
    const most = Math.max(...layout.shapes.map((s) => (s.rows * s.cols) / q.vecDim));
    this.vectors = arena.allocF32(most * q.vecDim);
    this.stageCodes = arena.u8(arena.alloc(most, 64), most);
    this.W = new Float32Array(most * q.vecDim);
    this.codes = layout.shapes.map((s) => new Uint8Array((s.rows * s.cols * q.stages) / q.vecDim)) as [Uint8Array, Uint8Array, Uint8Array];
    this.record = new Uint8Array(layout.recordBytes);
  }

  /**
   * Convert layer `plan.layer`: the bank goes to `bankFile`, its codebooks (WCBK records numbered
   * from the layer's base) are returned. `onExpert` is told the source bytes each expert consumed;
   * `pause` runs between the steps of the codebooks' training and of each expert (the event loop's
   * turn; it may throw to stop the job).
   */
  async convertLayer(plan: LayerPlan, bankFile: string, onExpert: (sourceBytes: number) => void, pause: () => Promise<void> = async () => {}): Promise<Uint8Array> {
    const books: Float32Array[][] = [];
    for (const kind of [0, 1, 2] as const) books.push(await this.train(plan, kind, pause));
    // a stop is passed on as it is, not as a write error of the bank
    let stopped = false;
    const stop = () =>
      pause().catch((e: unknown) => {
        stopped = true;
        throw e;
      });
    const bits = new Uint16Array(books.length * this.q.stages * this.q.entries * this.q.vecDim);
    let o = 0;
    for (const stages of books) for (const C of stages) for (let i = 0; i < C.length; i++) bits[o++] = encodeF16(C[i]);

    let fd: number;
    try {
      fd = fs.openSync(bankFile, 'w');
    } catch (e) {
      throw fromSystemError(bankFile, e);
    }
    try {
      for (let e = 0; e < plan.experts; e++) {
        await stop();
        let bytes = 0;
        const scales: Uint16Array[] = [];
        for (const kind of [0, 1, 2] as const) {
          if (kind) await stop();
          const { rows, cols } = this.layout.shapes[kind];
          const name = this.expertTensor(plan.layer, e, kind);
          bytes += this.st.info(name).sourceBytes;
          this.read(name, rows, cols);
          scales.push(normalizeRows(this.W, rows, cols, this.vectors, `the checkpoint's ${this.st.prefix}${name}`));
          await encodeResidual(this.ws, this.vectors, (rows * cols) / this.q.vecDim, books[kind], this.stageCodes, this.codes[kind], stop);
        }
        const rec = encodeExpertRecord(plan.layer, e, plan.codebookBase, this.layout, this.q, this.codes, scales as [Uint16Array, Uint16Array, Uint16Array], this.record);
        let done = 0;
        const pos = e * this.layout.recordBytes;
        while (done < rec.length) done += fs.writeSync(fd, rec, done, rec.length - done, pos + done);
        onExpert(bytes);
      }
      fs.fsyncSync(fd);
    } catch (err) {
      throw stopped ? err : fromSystemError(bankFile, err);
    } finally {
      fs.closeSync(fd);
    }
    return encodeCodebooks(bits, books.length * this.q.stages, this.q, plan.codebookBase);
  }

  /**
   * One matrix kind's codebooks. Vectors come from `cbSample` experts spread evenly over the layer,
   * the same number from each, drawn without replacement by a generator seeded from (seed, layer,
   * kind): a resumed layer draws exactly what an uninterrupted run drew.
   */
  private async train(plan: LayerPlan, kind: 0 | 1 | 2, pause: () => Promise<void>): Promise<Float32Array[]> {
    const { vecDim: D } = this.q;
    const { rows, cols } = this.layout.shapes[kind];
    const rng = new Rng(deriveSeed(this.settings.seed, plan.layer, kind));
    const picks = Math.min(this.settings.cbSample, plan.experts);
    const per = Math.max(1, Math.floor(this.settings.trainVectors / picks));
    const nvec = (rows * cols) / D;
    const order = new Int32Array(nvec);
    let n = 0;
    for (let j = 0; j < picks; j++) {
      await pause();
      const e = Math.floor((j * plan.experts) / picks);
      this.read(this.expertTensor(plan.layer, e, kind), rows, cols);
      normalizeRows(this.W, rows, cols, this.vectors);
      for (let i = 0; i < nvec; i++) order[i] = i;
      const take = Math.min(per, nvec, this.settings.trainVectors - n);
      for (let i = 0; i < take; i++) {
        const k = i + rng.int(nvec - i);
        const v = order[k];
        order[k] = order[i];
        order[i] = v;
        this.sample.set(this.vectors.subarray(v * D, (v + 1) * D), (n + i) * D);
      }
      n += take;
    }
    return trainResidual(this.ws, this.sample, n, rng, this.settings.iters, { idx: this.idx, dist: this.dist }, pause);
  }

  private read(name: string, rows: number, cols: number): void {
    const W = this.W.subarray(0, rows * cols);
    this.st.readRows(name, 0, rows, W);
    for (let i = 0; i < W.length; i++) if (!Number.isFinite(W[i])) throw new WasteError('E_FORMAT', `the checkpoint's ${this.st.prefix}${name} holds a non-finite value at index ${i}`);
  }
}

