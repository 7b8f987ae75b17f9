import { type SessionLayout, MAX_SESSION_META, decodeSession, encodeSession, sessionFileBytes } from '../base/state-file.js';
import type { DeepseekConfig } from './config.js';
import type { LatentState } from './state.js';

/**
 * A saved session of a DeepSeek-V3-family model: each layer's latent cache for the positions
 * consumed, with the token history, so that continuing after a load is bit for bit continuing
 * without a stop. The envelope is the shared one (base/state-file.ts), little-endian:
 *
 *   magic "WSEL", version 1, identity of the model (32 bytes), layers, latent width, positions,
 *   logits saved (0 or vocab size), bytes of application data; then the token ids, the logits, the
 *   application data (padded to 4 bytes), layer by layer `positions` rows of the latent cache, and
 *   a CRC32 of all that precedes it.
 */
function layout(cfg: DeepseekConfig): SessionLayout<LatentState> {
  const width = cfg.mla.kvLoraRank + cfg.mla.qkRope;
  return {
    magic: 0x4c455357, // 'WSEL'
    version: 1,
    kind: ' of a DeepSeek-V3-family model',
    vocab: cfg.vocab,
    words: (pos, nLogits, nMeta) => [cfg.layers, width, pos, nLogits, nMeta],
    at: { pos: 2, logits: 3, meta: 4 },
    shapes: () => "its shapes do not match this model's",
    floats: (pos) => cfg.layers * pos * width,
    *arrays(state, pos) {
      for (const c of state.caches) yield c.subarray(0, pos * state.width);
    },
  };
}

export function encodeLatentState(cfg: DeepseekConfig, state: LatentState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
  return encodeSession(layout(cfg), state, history, logits, meta, identity);
}

/** The largest file a session of `limit` positions can be saved as: what a load reads at most. */
export function maxLatentStateBytes(cfg: DeepseekConfig, limit: number): number {
  return sessionFileBytes(layout(cfg), limit, cfg.vocab, MAX_SESSION_META);
}

/** Check `data` and load it into `state`; returns the token history and last logits. Nothing is changed on failure. */
export function decodeLatentState(cfg: DeepseekConfig, state: LatentState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void = () => {}): { history: number[]; logits: Float32Array | undefined } {
  return decodeSession(layout(cfg), state, data, identity, file, accept);
}
