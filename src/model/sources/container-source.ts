import type { Container } from '../../container/open.js';
import type { TrunkEntry } from '../../container/manifest.js';
import { Fmt, fmtName } from '../../container/format.js';
import { type Tensor, makeViews, rowsCols, storedSizes } from '../../container/tensor.js';
import type { Arena } from '../../memory/arena.js';
import { aligned } from '../../memory/align.js';
import { WasteError } from '../../util/errors.js';
import type { WeightSource } from './source.js';

/** Trunk weights from a WASTE container, loaded exactly as stored (F32, F16, Q8G or Q4G). */
export class ContainerSource implements WeightSource {
  readonly label = 'manifest.json';
  readonly denseExperts = false;
  private embedEntry: TrunkEntry | undefined;

  constructor(
    private readonly c: Container,
    private readonly prefix = c.manifest.tensorPrefix,
  ) {}

  private get embed(): TrunkEntry {
    return (this.embedEntry ??= this.entry('model.embed_tokens.weight'));
  }

  unprefixed(): WeightSource {
    return new ContainerSource(this.c, '');
  }

  private entry(name: string): TrunkEntry {
    const full = this.prefix + name;
    const e = this.c.tensors.get(full);
    if (!e) throw new WasteError('E_FORMAT', `manifest.json: required tensor ${full} is missing from the trunk`);
    return e;
  }

  has(name: string): boolean {
    return this.c.tensors.has(this.prefix + name);
  }

  shape(name: string): number[] {
    return this.entry(name).shape;
  }

  residentBytes(name: string): number {
    const e = this.entry(name);
    if (e.fmt !== Fmt.F32 && e.fmt !== Fmt.F16 && e.fmt !== Fmt.Q8G && e.fmt !== Fmt.Q4G)
      throw new WasteError('E_UNSUPPORTED', `unsupported: tensor ${e.name} is stored as ${fmtName(e.fmt)}`);
    const { rows, cols } = rowsCols(e.shape);
    const s = storedSizes(e.fmt, rows, cols, e.group);
    return aligned(s.payload) + aligned(s.scaleBytes);
  }

  loadMatrix(name: string, arena: Arena): Tensor {
    const e = this.entry(name);
    const { rows, cols } = rowsCols(e.shape);
    const s = storedSizes(e.fmt, rows, cols, e.group);
    const off = arena.alloc(s.payload, 64);
    const scaleOff = s.scaleBytes ? arena.alloc(s.scaleBytes, 64) : -1;
    this.c.trunk.readInto(arena.u8(off, s.payload), e.off, e.name);
    if (s.scaleBytes) this.c.trunk.readInto(arena.u8(scaleOff, s.scaleBytes), e.scaleOff, `${e.name} scales`);
    const t: Tensor = { name: e.name, fmt: e.fmt, shape: e.shape, rows, cols, group: e.group, groups: s.groups, rowBytes: s.rowBytes, arena, off, scaleOff };
    makeViews(t);
    checkFinite(t);
    return t;
  }

  readVector(name: string, out: Float32Array): void {
    const e = this.entry(name);
    const { rows, cols } = rowsCols(e.shape);
    for (let r = 0; r < rows; r++) this.c.trunk.readRow(e, r, out.subarray(r * cols, (r + 1) * cols));
    for (let i = 0; i < out.length; i++)
      if (!Number.isFinite(out[i])) throw new WasteError('E_FORMAT', `trunk.bin: tensor ${e.name} holds a non-finite value at index ${i}`);
  }

  embedRow(token: number, dst: Float32Array): void {
    this.c.trunk.readRow(this.embed, token, dst);
  }

  /** Layer L's codebooks, [entry][dim] per stage, transposed into [stage][dim][entry] per kind. */
  fillBooks(L: number, out: [Float32Array, Float32Array, Float32Array]): void {
    const q = this.c.quant!;
    const cb = this.c.codebooks!;
    const base = this.c.banks.get(L)!.codebookBase;
    const per = q.entries * q.vecDim;
    for (let kind = 0; kind < 3; kind++)
      for (let s = 0; s < q.stages; s++) {
        const book = (base + kind * q.stages + s) * per;
        for (let e = 0; e < q.entries; e++)
          for (let d = 0; d < q.vecDim; d++) out[kind][(s * q.vecDim + d) * q.entries + e] = cb.values[book + e * q.vecDim + d];
      }
  }
}

/** A NaN or infinity in a weight would only show up as a silently wrong answer; refuse it at load. */
function checkFinite(t: Tensor): void {
  const bad = (what: string, i: number) => new WasteError('E_FORMAT', `trunk.bin: tensor ${t.name} holds a non-finite ${what} at index ${i}`);
  if (t.f32) {
    for (let i = 0; i < t.f32.length; i++) if (!Number.isFinite(t.f32[i])) throw bad('value', i);
  } else {
    const h = t.f16 ?? t.scales!;
    for (let i = 0; i < h.length; i++) if ((h[i] & 0x7c00) === 0x7c00) throw bad(t.f16 ? 'value' : 'group scale', i);
  }
}
