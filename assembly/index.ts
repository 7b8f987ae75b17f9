// The kernel module: compiled to WebAssembly SIMD128 over an imported shared memory (an arena).
export { mm, mm16, mmn, mvt } from './matmul';
export { act_prep, act_prep16 } from './prep';
export { vq_lut, vq_apply, vq_lut2, vq_apply2 } from './vq';
export { vq_experts } from './vq-experts';
export { kda_prep, kda_step, kda_out } from './kda';
export { mla_heads } from './mla';
export { attend } from './attention';
export { rmsnorm, silu_mul, situ_mul, sigmoid_mul, attn_res, add, moe_route, moe_combine, read_bw } from './elementwise';
export { vq_nearest, vq_subtract, dist_update } from './kmeans';
export { vit_attn, gelu, erf_at } from './vision';

/** End of the module's static data: arenas keep everything they allocate above it. */
export function heap_base(): usize {
  return __heap_base;
}
