import type { ExpertQuant } from '../container/format.js';
import type { WasmKernels } from '../kernels/wasm/index.js';
import type { Arena } from '../memory/arena.js';
import { WasteError } from '../util/errors.js';
import { decodeF16, encodeF16 } from '../util/f16.js';
import type { Rng } from '../util/prng.js';

/**
 * Residual vector quantization for the converter: codebooks by k-means (k-means++ seeding on a
 * sample, a fixed number of Lloyd iterations, a seeded RNG), one stage after another on what the
 * previous stages left; encoding by the nearest centroid, stage by stage. The heavy part — every
 * nearest-centroid search — runs in the WebAssembly kernels across the worker pool; everything is
 * deterministic given the seed, whatever the thread count.
 */
export interface VqWorkspace {
  k: WasmKernels;
  arena: Arena;
  q: ExpertQuant;
  /** Transposed centroids [dim][entries] and their squared norms, for one stage at a time. */
  CT: Float32Array;
  cn: Float32Array;
  /** One centroid, for the k-means++ distance update. */
  c: Float32Array;
}

export function vqWorkspace(k: WasmKernels, arena: Arena, q: ExpertQuant): VqWorkspace {
  return { k, arena, q, CT: arena.allocF32(q.vecDim * q.entries), cn: arena.allocF32(q.entries), c: arena.allocF32(q.vecDim) };
}

/** Load one stage's centroids (entry-major [entries][dim]) into the workspace's transposed form. */
function setCentroids(ws: VqWorkspace, C: Float32Array): void {
  const { entries, vecDim: D } = ws.q;
  for (let e = 0; e < entries; e++) {
    let n = 0;
    for (let d = 0; d < D; d++) {
      const v = C[e * D + d];
      ws.CT[d * entries + e] = v;
      n += v * v;
    }
    ws.cn[e] = n;
  }
}

/**
 * Train `stages` codebooks on the sample X [n][dim] (in the workspace's arena; it is consumed: left
 * holding the residual). Returns each stage's centroids, entry-major, already rounded to f16 as
 * they will be stored, so encoding uses exactly what the reader will decode. `pause` runs between
 * iterations (a long job's turn for the event loop; it may throw to stop the job).
 */
export async function trainResidual(
  ws: VqWorkspace,
  X: Float32Array,
  n: number,
  rng: Rng,
  iters: number,
  scratch: { idx: Int32Array; dist: Float32Array },
  pause: () => Promise<void> = async () => {},
): Promise<Float32Array[]> {
  const { entries, vecDim: D, stages } = ws.q;
  const books: Float32Array[] = [];
  for (let s = 0; s < stages; s++) {
    const C = await seedPlusPlus(ws, X, n, rng, scratch.dist, pause);
    for (let it = 0; it < iters; it++) {
      await pause();
      setCentroids(ws, C);
      ws.k.vqNearest(X, ws.CT, ws.cn, entries, D, scratch.idx, n, scratch.dist);
      lloydUpdate(C, X, n, D, entries, scratch.idx, scratch.dist);
    }
    // as stored, and as both engines read it: an f16 subnormal is zero to the C engine's codebook
    // loader, so none is written (they are below 2^-14 of a row-normalized weight)
    for (let i = 0; i < C.length; i++) {
      const h = encodeF16(C[i]);
      C[i] = decodeF16((h & 0x7c00) === 0 ? h & 0x8000 : h);
    }
    setCentroids(ws, C);
    ws.k.vqNearest(X, ws.CT, ws.cn, entries, D, scratch.idx, n);
    for (let r = 0; r < n; r++) {
      const c = scratch.idx[r] * D;
      for (let d = 0; d < D; d++) X[r * D + d] -= C[c + d];
    }
    books.push(C);
  }
  return books;
}

/** k-means++: the first centroid uniformly, each next with probability ∝ squared distance. */
async function seedPlusPlus(ws: VqWorkspace, X: Float32Array, n: number, rng: Rng, dmin: Float32Array, pause: () => Promise<void>): Promise<Float32Array> {
  const { entries, vecDim: D } = ws.q;
  const C = new Float32Array(entries * D);
  const c = ws.c;
  dmin.fill(Infinity, 0, n);
  let pick = Math.min(n - 1, Math.floor(rng.float() * n));
  for (let e = 0; e < entries; e++) {
    if ((e & 31) === 31) await pause();
    for (let d = 0; d < D; d++) C[e * D + d] = c[d] = X[pick * D + d];
    ws.k.distUpdate(X, c, D, dmin, n);
    let total = 0;
    for (let r = 0; r < n; r++) total += dmin[r];
    if (!(total > 0)) {
      pick = Math.min(n - 1, Math.floor(rng.float() * n));
      continue;
    }
    let target = rng.float() * total;
    pick = n - 1;
    for (let r = 0; r < n; r++) {
      target -= dmin[r];
      if (target < 0) {
        pick = r;
        break;
      }
    }
  }
  return C;
}

/** Each centroid to the mean of its points; an empty one to the point farthest from its centroid. */
function lloydUpdate(C: Float32Array, X: Float32Array, n: number, D: number, entries: number, idx: Int32Array, dist: Float32Array): void {
  const sum = new Float64Array(entries * D);
  const count = new Int32Array(entries);
  for (let r = 0; r < n; r++) {
    const e = idx[r];
    count[e]++;
    for (let d = 0; d < D; d++) sum[e * D + d] += X[r * D + d];
  }
  const taken = new Set<number>();
  for (let e = 0; e < entries; e++) {
    if (count[e] > 0) {
      for (let d = 0; d < D; d++) C[e * D + d] = sum[e * D + d] / count[e];
      continue;
    }
    let far = -1;
    for (let r = 0; r < n; r++) if (!taken.has(r) && (far < 0 || dist[r] > dist[far])) far = r;
    if (far < 0) continue;
    taken.add(far);
    for (let d = 0; d < D; d++) C[e * D + d] = X[far * D + d];
  }
}

/**
 * Encode X [n][dim] (consumed: left holding the residual) against the stages' books: `out`
 * receives [n][stages] indices, row-major, as the record encoder takes them.
 */
export async function encodeResidual(
  ws: VqWorkspace,
  X: Float32Array,
  n: number,
  books: Float32Array[],
  idx: Uint8Array,
  out: Uint8Array,
  pause: () => Promise<void> = async () => {},
): Promise<void> {
  const { entries, vecDim: D, stages } = ws.q;
  for (let s = 0; s < stages; s++) {
    if (s) await pause();
    const C = books[s];
    setCentroids(ws, C);
    ws.k.vqNearest(X, ws.CT, ws.cn, entries, D, idx, n);
    // the residual in the kernels: in JavaScript this loop took as long as the search on K3's experts
    ws.k.vqSubtract(X, ws.CT, entries, D, idx, n);
    for (let r = 0; r < n; r++) out[r * stages + s] = idx[r];
  }
}

/**
 * Rows of W [rows][cols] scaled by their absmax (rounded to f16, as stored) into X, as vectors of
 * dim floats. Returns the f16 scales.
 */
export function normalizeRows(W: Float32Array, rows: number, cols: number, X: Float32Array, what = 'a matrix'): Uint16Array {
  const scales = new Uint16Array(rows);
  for (let r = 0; r < rows; r++) {
    let amax = 0;
    for (let c = 0; c < cols; c++) amax = Math.max(amax, Math.abs(W[r * cols + c]));
    const h = encodeF16(amax);
    const s = decodeF16(h);
    if (!Number.isFinite(s)) throw new WasteError('E_UNSUPPORTED', `${what}: row ${r} holds ${amax}, too large for an f16 row scale`);
    scales[r] = h;
    const inv = s > 0 ? 1 / s : 0;
    for (let c = 0; c < cols; c++) X[r * cols + c] = W[r * cols + c] * inv;
  }
  return scales;
}
