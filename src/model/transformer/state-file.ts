import { type SessionLayout, MAX_SESSION_META, decodeSession, encodeSession, sessionFileBytes } from '../base/state-file.js';
import type { TransformerConfig } from './config.js';
import { type KvState, cacheSlots } from './state.js';

/**
 * A saved session of a transformer-family model: everything a sequence carries from one token to
 * the next — each layer's keys and values for the slots written — with the token history, so that
 * continuing after a load is bit for bit continuing without a stop. The envelope is the shared
 * one (base/state-file.ts), little-endian:
 *
 *   magic "WSES", version 2, identity of the model (32 bytes), layers, kv heads, head dim,
 *   positions, logits saved (0 or vocab size), bytes of application data, then per layer its slots
 *   (a window's ring, or the context); then the token ids, the logits, the application data
 *   (padded to 4 bytes), layer by layer min(positions, slots) rows of keys then of values, and a
 *   CRC32 of all that precedes it.
 */

function layout(cfg: TransformerConfig, slots: number[]): SessionLayout<KvState> {
  const row = cfg.attention.kvHeads * cfg.attention.headDim;
  return {
    magic: 0x53455357, // 'WSES'
    version: 2,
    kind: '',
    vocab: cfg.vocab,
    words: (pos, nLogits, nMeta) => [cfg.layers, cfg.attention.kvHeads, cfg.attention.headDim, pos, nLogits, nMeta, ...slots],
    at: { pos: 3, logits: 4, meta: 5 },
    shapes: (byte) => `its shapes do not match this session's (field at byte ${byte})`,
    floats: (pos) => slots.reduce((a, s) => a + 2 * Math.min(pos, s) * row, 0),
    *arrays(state, pos) {
      for (let L = 0; L < cfg.layers; L++) yield* state.saved(L, pos);
    },
  };
}

// the slots are the session's own: a file from a session of another context length has others
const own = (state: KvState) => state.kv.map((c) => c.slots);

export function encodeKvState(cfg: TransformerConfig, state: KvState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
  return encodeSession(layout(cfg, own(state)), state, history, logits, meta, identity);
}

/** The largest file a session of `limit` positions can be saved as: what a load reads at most. */
export function maxKvStateBytes(cfg: TransformerConfig, limit: number): number {
  return sessionFileBytes(layout(cfg, cfg.layerKinds.map((_, L) => cacheSlots(cfg, L, limit))), limit, cfg.vocab, MAX_SESSION_META);
}

/** Check `data` and load it into `state`; returns the token history and last logits. Nothing is changed on failure. */
export function decodeKvState(cfg: TransformerConfig, state: KvState, data: Uint8Array, identity: Uint8Array, file: string, accept: (meta: Uint8Array) => void = () => {}): { history: number[]; logits: Float32Array | undefined } {
  return decodeSession(layout(cfg, own(state)), state, data, identity, file, accept);
}
