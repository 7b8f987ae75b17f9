/**
 * WASTE container format v0: the constants and the derived expert-record layout, shared by the
 * reader (this folder) and the writers (synth, convert), as docs/FORMAT.md describes them; every
 * number here is derived from the manifest, never believed from a header.
 */
export const FORMAT_VERSION = 0;
export const ALIGN = 4096;

export const MAGIC_EXPERT = 0x50584557; // 'WEXP'
export const MAGIC_CODEBOOK = 0x4b424357; // 'WCBK'

export const EXPERT_HEADER_BYTES = 48;
export const CODEBOOK_HEADER_BYTES = 16;

/** Tensor and record format ids (`fmt`). */
export const Fmt = {
  F32: 0,
  F16: 1,
  Q8G: 2,
  Q4G: 3,
  VQ3R: 4,
  VQ2R: 5,
  SUB1: 6,
  Q3G: 7,
  VQ4P: 8,
} as const;
export type FmtId = (typeof Fmt)[keyof typeof Fmt];

export const FMT_NAMES: Record<number, string> = {
  0: 'F32',
  1: 'F16',
  2: 'Q8G',
  3: 'Q4G',
  4: 'VQ3R',
  5: 'VQ2R',
  6: 'SUB1',
  7: 'Q3G',
  8: 'VQ4P',
};

export function fmtName(fmt: number): string {
  return FMT_NAMES[fmt] ?? `fmt ${fmt}`;
}

/** Geometry of the residual vector quantization shared by every expert of a container. */
export interface ExpertQuant {
  /** Name as the manifest states it ("VQ3R", "VQ2R"). */
  name: string;
  stages: number;
  vecDim: number;
  entries: number;
  /** Rows per index block; 0 means plain row-major. */
  indexBlock: number;
  indexBits: number;
}

/** One expert matrix: `rows` outputs, `cols` inputs. */
export interface MatrixShape {
  rows: number;
  cols: number;
}

/** Where each part of an expert record lives, derived from the shapes and the quantization. */
export interface RecordLayout {
  gateOff: number;
  upOff: number;
  downOff: number;
  /** Start of the f16 per-row scales: gate rows, then up rows, then down rows. */
  scaleOff: number;
  /** End of the checksummed payload (header excluded, padding excluded). */
  payloadEnd: number;
  /** Bytes the record occupies on disk, a multiple of ALIGN. */
  recordBytes: number;
  shapes: [MatrixShape, MatrixShape, MatrixShape];
}

/** Index bytes of one matrix: rows padded to whole blocks, one byte per stage per vector. */
export function indexBytes(shape: MatrixShape, q: ExpertQuant): number {
  const vectors = shape.cols / q.vecDim;
  const rows = q.indexBlock > 0 ? Math.ceil(shape.rows / q.indexBlock) * q.indexBlock : shape.rows;
  return (rows * vectors * q.stages * q.indexBits) / 8;
}

/** gate = [inter, hidden], up = [inter, hidden], down = [hidden, inter]. */
export function expertShapes(hidden: number, inter: number): [MatrixShape, MatrixShape, MatrixShape] {
  return [
    { rows: inter, cols: hidden },
    { rows: inter, cols: hidden },
    { rows: hidden, cols: inter },
  ];
}

export function recordLayout(hidden: number, inter: number, q: ExpertQuant): RecordLayout {
  const shapes = expertShapes(hidden, inter);
  const gateOff = EXPERT_HEADER_BYTES;
  const upOff = gateOff + indexBytes(shapes[0], q);
  const downOff = upOff + indexBytes(shapes[1], q);
  const scaleOff = downOff + indexBytes(shapes[2], q);
  const payloadEnd = scaleOff + 2 * (shapes[0].rows + shapes[1].rows + shapes[2].rows);
  const recordBytes = Math.ceil(payloadEnd / ALIGN) * ALIGN;
  return { gateOff, upOff, downOff, scaleOff, payloadEnd, recordBytes, shapes };
}

/** The fmt byte a record of this quantization carries (VQ3R for every stage count but 2). */
export function recordFmt(q: ExpertQuant): number {
  if (q.indexBits === 6) return Fmt.VQ4P;
  return q.stages === 2 ? Fmt.VQ2R : Fmt.VQ3R;
}

/** Offset, in a blocked index array, of the `stages` bytes for (row, vector v). */
export function indexOffset(row: number, v: number, vectors: number, q: ExpertQuant): number {
  if (q.indexBlock <= 0) return (row * vectors + v) * q.stages;
  const b = Math.floor(row / q.indexBlock);
  const r = row - b * q.indexBlock;
  return ((b * vectors + v) * q.indexBlock + r) * q.stages;
}
