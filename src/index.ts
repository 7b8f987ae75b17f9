/**
 * waste — run mixture-of-experts language models far larger than RAM.
 *
 *   import { Model } from 'waste';
 *   const model = await Model.open('path/to/container');
 *   const session = model.newSession();
 *   const logits = await session.forward([3, 7, 11]);
 *   await model.close();
 */
import './util/supported-node.js';
export { Model, type OpenOptions, type SessionOptions } from './api/model.js';
export { Session, type SessionGenerateOptions } from './api/session.js';
export { Chat, type ChatOptions } from './api/chat.js';
export type { GenerateOptions, GeneratedToken, GenerationResult, FinishReason } from './generate/generate.js';
export type { SamplingOptions } from './generate/sampler.js';
export type { Tokenizer, TokenDecoder } from './tokenizer/tokenizer.js';
export { loadTokenizer } from './tokenizer/load.js';
export type { ChatFormat, ChatMessage, ToolCall, ReplySyntax } from './chat/format.js';
export { ReplyParser, type ReplyEvent, type ReplyReader } from './chat/reply.js';
export { XtmlReplyReader } from './chat/xtml/reply.js';
export { readerFor, replyReader } from './chat/reply-reader.js';
export { replySyntaxOf, type ToolSyntax } from './chat/syntax.js';
export { CallMarkupReader } from './chat/call-reader.js';
export { HarmonyReplyReader } from './chat/harmony-reply.js';
export { renderXtml, type XtmlRequest } from './chat/xtml/render.js';
export type { Segment as XtmlSegment } from './chat/xtml/tags.js';
export { startServer, createApp, type ServerOptions, type RunningServer } from './server/server.js';
export { WasteError, type WasteErrorCode } from './util/errors.js';
export type { KimiLinearConfig } from './model/kimi/linear-config.js';
export type { ModelConfig, LayerKind } from './core/model-config.js';
export type { Kernels, Activations } from './kernels/types.js';
export { tsKernels, makeTsKernels } from './kernels/ts/index.js';
export { WasmKernels } from './kernels/wasm/index.js';
export { writeSyntheticContainer, type SynthOptions, synthShapes } from './synth/synth.js';
export { writeSyntheticCheckpoint, type CheckpointOptions } from './synth/checkpoint.js';
export { convert, type ConvertOptions, type ConvertResult } from './convert/convert.js';
export { pull, planPull, type PullOptions, type PullPlan, type PullResult } from './pull/pull.js';
export type { HubOptions } from './pull/hub.js';
export type { ConvertSettings } from './convert/plan.js';
export { measureQuality, type QualityOptions, type QualityReport } from './quality/quality.js';

import { Model as ModelClass, type OpenOptions as Options } from './api/model.js';
/** Open a container (or a HuggingFace checkpoint, in f32) — the same as Model.open. */
export function open(path: string, opts: Options = {}): Promise<ModelClass> {
  return ModelClass.open(path, opts);
}
