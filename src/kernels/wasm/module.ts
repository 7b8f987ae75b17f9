import * as fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ARENA_RESERVED } from '../../memory/arena.js';
import { WasteError } from '../../util/errors.js';

/**
 * The compiled kernel module (dist/kernels.wasm, built from assembly/ by `npm install`). Compiled
 * once per process; every thread instantiates it once per arena it computes in.
 */
let compiled: WebAssembly.Module | undefined;

export function kernelModule(): WebAssembly.Module {
  if (compiled) return compiled;
  const file = fileURLToPath(new URL('../../../kernels.wasm', import.meta.url));
  let bytes: Buffer;
  try {
    bytes = fs.readFileSync(file);
  } catch {
    throw new WasteError('E_IO', `${file} is missing; run \`npm install\` (or \`npm run build\`) to compile the kernels`);
  }
  compiled = new WebAssembly.Module(bytes);
  return compiled;
}

export type KernelExports = {
  mm: (...a: number[]) => void;
  mm16: (...a: number[]) => void;
  mmn: (...a: number[]) => void;
  act_prep: (...a: number[]) => void;
  act_prep16: (...a: number[]) => void;
  mvt: (...a: number[]) => void;
  vq_lut: (...a: number[]) => void;
  vq_apply: (...a: number[]) => void;
  vq_lut2: (...a: number[]) => void;
  vq_apply2: (...a: number[]) => void;
  vq_experts: (...a: number[]) => void;
  kda_prep: (...a: number[]) => void;
  kda_step: (...a: number[]) => void;
  kda_out: (...a: number[]) => void;
  mla_heads: (...a: number[]) => void;
  attend: (...a: number[]) => void;
  rmsnorm: (...a: number[]) => void;
  silu_mul: (...a: number[]) => void;
  situ_mul: (...a: number[]) => void;
  sigmoid_mul: (...a: number[]) => void;
  attn_res: (...a: number[]) => void;
  add: (...a: number[]) => void;
  moe_route: (...a: number[]) => void;
  moe_combine: (...a: number[]) => void;
  read_bw: (...a: number[]) => void;
  vq_nearest: (...a: number[]) => void;
  vq_subtract: (...a: number[]) => void;
  dist_update: (...a: number[]) => void;
  vit_attn: (...a: number[]) => void;
  gelu: (...a: number[]) => void;
  erf_at: (x: number) => number;
  heap_base: () => number;
};

/** Kernels the pool can split across threads: their last three parameters are (tmp, begin, end). */
export const PARALLEL_KERNELS = ['mm', 'mm16', 'mvt', 'vq_lut', 'vq_apply', 'kda_step', 'mla_heads', 'read_bw', 'vq_nearest', 'vq_subtract', 'dist_update', 'vit_attn', 'vq_lut2', 'vq_apply2', 'mmn', 'vq_experts', 'attend'] as const;
export type ParallelKernel = (typeof PARALLEL_KERNELS)[number];

export function instantiate(module: WebAssembly.Module, memory: WebAssembly.Memory): KernelExports {
  const inst = new WebAssembly.Instance(module, { env: { memory } });
  const ex = inst.exports as unknown as KernelExports;
  if (ex.heap_base() > ARENA_RESERVED)
    throw new WasteError('E_STATE', `the kernel module's static data (${ex.heap_base()} bytes) exceeds the arena's reserved ${ARENA_RESERVED}`);
  return ex;
}
