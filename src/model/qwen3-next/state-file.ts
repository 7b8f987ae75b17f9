import { type SessionLayout, MAX_SESSION_META, decodeSession, encodeSession, sessionFileBytes } from '../base/state-file.js';
import type { Qwen3NextConfig } from './config.js';
import { type Qwen3NextState, savedFloats } from './state.js';

/**
 * A saved session of a Qwen3-Next model: everything a sequence carries from one token to the
 * next — each full-attention layer's keys and values for the positions consumed, each DeltaNet
 * layer's conv history and recurrent state — with the token history, so that continuing after a
 * load is bit for bit continuing without a stop. The envelope is the shared one
 * (base/state-file.ts), little-endian:
 *
 *   magic "WSQN", version 1, identity of the model (32 bytes), layers, positions, logits saved (0
 *   or vocab size), bytes of application data, then per layer the floats it holds; then the
 *   token ids, the logits, the application data (padded to 4 bytes), layer by layer its floats
 *   (keys then values; or conv history then S), and a CRC32 of all that precedes it.
 */
function layout(cfg: Qwen3NextConfig): SessionLayout<Qwen3NextState> {
  const sizes = (pos: number) => cfg.layerKinds.map((_, L) => savedFloats(cfg, L, pos));
  return {
    magic: 0x4e515357, // 'WSQN'
    version: 1,
    kind: ' of a Qwen3-Next model',
    vocab: cfg.vocab,
    words: (pos, nLogits, nMeta) => [cfg.layers, pos, nLogits, nMeta, ...sizes(pos)],
    at: { pos: 1, logits: 2, meta: 3 },
    shapes: (byte) => `its shapes do not match this model's (field at byte ${byte})`,
    floats: (pos) => sizes(pos).reduce((a, b) => a + b, 0),
    *arrays(state, pos) {
      for (let L = 0; L < cfg.layers; L++) yield* state.saved(L, pos);
    },
  };
}

export function encodeQwen3NextState(cfg: Qwen3NextConfig, state: Qwen3NextState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
  return encodeSession(layout(cfg), state, history, logits, meta, identity);
}

/** The largest file a session of `limit` positions can be saved as: what a load reads at most. */
export function maxQwen3NextStateBytes(cfg: Qwen3NextConfig, limit: number): number {
  return sessionFileBytes(layout(cfg), limit, cfg.vocab, MAX_SESSION_META);
}

/** Check `data` and load it into `state`; returns the token history and last logits. Nothing is changed on failure. */
export function decodeQwen3NextState(cfg: Qwen3NextConfig, state: Qwen3NextState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void = () => {}): { history: number[]; logits: Float32Array | undefined } {
  return decodeSession(layout(cfg), state, data, identity, file, accept);
}
