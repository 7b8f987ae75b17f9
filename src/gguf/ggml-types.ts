/**
 * The tensor types a GGUF file may name (ggml's `ggml_type`): each one's number, name, and the
 * bytes of one block of `blockElements` values. Facts from ggml's published ggml-common.h and
 * gguf-py's constants (GGML_QUANT_SIZES); the numbers are part of the file format.
 */
export interface GgmlType {
  id: number;
  name: string;
  /** Values per block; a row (the first dimension) is a whole number of blocks. */
  blockElements: number;
  /** Bytes per block. */
  blockBytes: number;
}

const QK_K = 256;

const TABLE: [number, string, number, number][] = [
  [0, 'F32', 1, 4],
  [1, 'F16', 1, 2],
  [2, 'Q4_0', 32, 2 + 16],
  [3, 'Q4_1', 32, 2 + 2 + 16],
  [6, 'Q5_0', 32, 2 + 4 + 16],
  [7, 'Q5_1', 32, 2 + 2 + 4 + 16],
  [8, 'Q8_0', 32, 2 + 32],
  [9, 'Q8_1', 32, 4 + 4 + 32],
  [10, 'Q2_K', QK_K, 2 + 2 + QK_K / 16 + QK_K / 4],
  [11, 'Q3_K', QK_K, 2 + QK_K / 4 + QK_K / 8 + 12],
  [12, 'Q4_K', QK_K, 2 + 2 + QK_K / 2 + 12],
  [13, 'Q5_K', QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12],
  [14, 'Q6_K', QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16],
  [15, 'Q8_K', QK_K, 4 + QK_K + QK_K / 8],
  [16, 'IQ2_XXS', QK_K, 2 + QK_K / 4],
  [17, 'IQ2_XS', QK_K, 2 + QK_K / 4 + QK_K / 32],
  [18, 'IQ3_XXS', QK_K, 2 + QK_K / 4 + QK_K / 8],
  [19, 'IQ1_S', QK_K, 2 + QK_K / 8 + QK_K / 16],
  [20, 'IQ4_NL', 32, 2 + 16],
  [21, 'IQ3_S', QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4],
  [22, 'IQ2_S', QK_K, 2 + QK_K / 4 + QK_K / 16],
  [23, 'IQ4_XS', QK_K, 2 + 2 + QK_K / 2 + QK_K / 64],
  [24, 'I8', 1, 1],
  [25, 'I16', 1, 2],
  [26, 'I32', 1, 4],
  [27, 'I64', 1, 8],
  [28, 'F64', 1, 8],
  [29, 'IQ1_M', QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32],
  [30, 'BF16', 1, 2],
  [34, 'TQ1_0', QK_K, 2 + 4 * 13],
  [35, 'TQ2_0', QK_K, 2 + 64],
  [39, 'MXFP4', 32, 1 + 16],
  [40, 'NVFP4', 64, 4 + 32],
  [41, 'Q1_0', 128, 2 + 16],
];

/** Numbers ggml once used and has removed from GGUF files: named in the refusal, so it says more than "unknown". */
const REMOVED: Record<number, string> = {
  4: 'Q4_2',
  5: 'Q4_3',
  31: 'Q4_0_4_4',
  32: 'Q4_0_4_8',
  33: 'Q4_0_8_8',
  36: 'IQ4_NL_4_4',
  37: 'IQ4_NL_4_8',
  38: 'IQ4_NL_8_8',
};

export const GGML_TYPES: ReadonlyMap<number, GgmlType> = new Map(TABLE.map(([id, name, blockElements, blockBytes]) => [id, { id, name, blockElements, blockBytes }]));

/** The type numbered `id`, or why there is none: a type ggml removed, or a number it never had. */
export function ggmlType(id: number): GgmlType | { refused: string } {
  const t = GGML_TYPES.get(id);
  if (t) return t;
  const removed = REMOVED[id];
  return { refused: removed ? `GGML type ${id} (${removed}) was removed from GGUF files; convert the model again with a current llama.cpp` : `unknown GGML type ${id}` };
}

export function ggmlTypeByName(name: string): GgmlType | undefined {
  for (const t of GGML_TYPES.values()) if (t.name === name) return t;
  return undefined;
}
