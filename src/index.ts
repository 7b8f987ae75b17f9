/**
 * waste — run mixture-of-experts language models far larger than RAM.
 *
 *   import { Model } from 'waste';
 *   const model = await Model.open('path/to/container');
 *   const session = model.newSession();
 *   const logits = await session.forward([3, 7, 11]);
 *   await model.close();
 */
export { Model, Session, type OpenOptions, type SessionOptions } from './engine.js';
export { WasteError, type WasteErrorCode } from './util/errors.js';
export type { KimiLinearConfig, LayerKind } from './model/kimi-linear/config.js';
export type { Kernels } from './kernels/types.js';
export { tsKernels } from './kernels/ts/index.js';
export { WasmKernels } from './kernels/wasm/index.js';
export { writeSyntheticContainer, type SynthOptions, SHAPES } from './synth/synth.js';
export { writeSyntheticCheckpoint, type CheckpointOptions } from './synth/checkpoint.js';
export { convert, type ConvertOptions, type ConvertResult } from './convert/convert.js';
export type { ConvertSettings } from './convert/plan.js';
export { measureQuality, type QualityOptions, type QualityReport } from './quality/quality.js';
