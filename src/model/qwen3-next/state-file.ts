import { crc32 } from '../../util/crc32.js';
import { WasteError } from '../../util/errors.js';
import type { Qwen3NextConfig } from './config.js';
import { type Qwen3NextState, savedFloats } from './state.js';

/**
 * A saved session of a Qwen3-Next model: everything a sequence carries from one token to the
 * next — each full-attention layer's keys and values for the positions consumed, each DeltaNet
 * layer's conv history and recurrent state — with the token history, so that continuing after a
 * load is bit for bit continuing without a stop. Little-endian:
 *
 *   magic "WSQN", version 1, identity of the model (32 bytes), layers, positions, logits saved (0
 *   or vocab size), bytes of application data, then per layer the floats it holds; then the
 *   token ids, the logits, the application data (padded to 4 bytes), layer by layer its floats
 *   (keys then values; or conv history then S), and a CRC32 of all that precedes it.
 *
 * A file is untrusted on load: its size, version, model identity and every shape are checked, and
 * the checksum, before the live state is touched.
 */
const MAGIC = 0x4e515357; // 'WSQN'
const VERSION = 1;
const FIXED = 4 * 2 + 32 + 4 * 4;
const MAX_META = 64 << 20;
const pad4 = (n: number) => (n + 3) & ~3;

const header = (cfg: Qwen3NextConfig) => FIXED + 4 * cfg.layers;

function fileBytes(cfg: Qwen3NextConfig, pos: number, nLogits: number, nMeta: number): number {
  let floats = 0;
  for (let L = 0; L < cfg.layers; L++) floats += savedFloats(cfg, L, pos);
  return header(cfg) + 4 * pos + 4 * nLogits + pad4(nMeta) + 4 * floats + 4;
}

function writeHeader(dv: DataView, cfg: Qwen3NextConfig, pos: number, nLogits: number, nMeta: number, identity: Uint8Array): void {
  dv.setUint32(0, MAGIC, true);
  dv.setUint32(4, VERSION, true);
  for (let i = 0; i < 32; i++) dv.setUint8(8 + i, identity[i]);
  const sizes = cfg.layerKinds.map((_, L) => savedFloats(cfg, L, pos));
  [cfg.layers, pos, nLogits, nMeta, ...sizes].forEach((v, i) => dv.setUint32(40 + 4 * i, v, true));
}

export function encodeQwen3NextState(cfg: Qwen3NextConfig, state: Qwen3NextState, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
  if (meta.length > MAX_META) throw new WasteError('E_ARG', `${meta.length} bytes of session data is more than the ${MAX_META} a session file holds`);
  const pos = state.pos;
  if (history.length !== pos) throw new WasteError('E_STATE', `the session's history (${history.length} tokens) does not match its position (${pos})`);
  const nLogits = logits ? cfg.vocab : 0;
  const out = new Uint8Array(fileBytes(cfg, pos, nLogits, meta.length));
  const dv = new DataView(out.buffer);
  writeHeader(dv, cfg, pos, nLogits, meta.length, identity);
  let o = header(cfg);
  for (const id of history) dv.setInt32((o += 4) - 4, id, true);
  const put = (a: Float32Array) => {
    out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o);
    o += a.byteLength;
  };
  if (logits) put(logits.subarray(0, cfg.vocab));
  out.set(meta, o);
  o += pad4(meta.length);
  for (let L = 0; L < cfg.layers; L++) for (const a of state.saved(L, pos)) put(a);
  dv.setUint32(o, crc32(out.subarray(0, o)), true);
  return out;
}

/** The largest file a session of `limit` positions can be saved as: what a load reads at most. */
export function maxQwen3NextStateBytes(cfg: Qwen3NextConfig, limit: number): number {
  return fileBytes(cfg, limit, cfg.vocab, MAX_META);
}

/** Check `data` and load it into `state`; returns the token history and last logits. Nothing is changed on failure. */
export function decodeQwen3NextState(
  cfg: Qwen3NextConfig,
  state: Qwen3NextState,
  data: Uint8Array,
  identity: Uint8Array,
  file: string,
  accept: (meta: Uint8Array) => void = () => {},
): { history: number[]; logits: Float32Array | undefined } {
  const bad = (what: string) => new WasteError('E_FORMAT', `${file}: ${what}`);
  const H = header(cfg);
  if (data.length < H + 4) throw bad(`${data.length} bytes is too short for a saved session`);
  const dv = new DataView(data.buffer, data.byteOffset, data.length);
  if (dv.getUint32(0, true) !== MAGIC) throw bad('not a saved session of a Qwen3-Next model (bad magic number)');
  const version = dv.getUint32(4, true);
  if (version !== VERSION) throw bad(`saved by session format version ${version}; this model's sessions are version ${VERSION}`);
  for (let i = 0; i < 32; i++) if (data[8 + i] !== identity[i]) throw new WasteError('E_ARG', `${file} was saved from another model; a session only loads into the model that saved it`);
  const pos = dv.getUint32(44, true);
  const nLogits = dv.getUint32(48, true);
  const nMeta = dv.getUint32(52, true);
  if (nLogits !== 0 && nLogits !== cfg.vocab) throw bad(`it holds ${nLogits} logits; this model's vocabulary is ${cfg.vocab}`);
  if (nMeta > MAX_META) throw bad(`${nMeta} bytes of session data is more than a session file holds`);
  if (pos > state.limit) throw bad(`it holds ${pos} positions, more than this session's context of ${state.limit}`);
  const expect = new DataView(new ArrayBuffer(H));
  writeHeader(expect, cfg, pos, nLogits, nMeta, identity);
  for (let o = 40; o < H; o += 4) if (dv.getUint32(o, true) !== expect.getUint32(o, true)) throw bad(`its shapes do not match this model's (field at byte ${o})`);
  const bytes = fileBytes(cfg, pos, nLogits, nMeta);
  if (data.length !== bytes) throw bad(`${data.length} bytes, expected ${bytes} for ${pos} positions`);
  if (dv.getUint32(bytes - 4, true) !== crc32(data.subarray(0, bytes - 4))) throw bad('checksum mismatch (the file is damaged)');
  const history: number[] = [];
  let o = H;
  for (let i = 0; i < pos; i++, o += 4) {
    const id = dv.getInt32(o, true);
    if (id < 0 || id >= cfg.vocab) throw bad(`token ${i} (${id}) is outside the vocabulary`);
    history.push(id);
  }
  const take = (a: Float32Array) => {
    new Uint8Array(a.buffer, a.byteOffset, a.byteLength).set(data.subarray(o, o + a.byteLength));
    o += a.byteLength;
  };
  const logits = nLogits ? new Float32Array(nLogits) : undefined;
  if (logits) take(logits);
  accept(data.slice(o, o + nMeta));
  o += pad4(nMeta);
  // every check passed: now the live state
  state.reset();
  for (let L = 0; L < cfg.layers; L++) for (const a of state.saved(L, pos)) take(a);
  state.pos = pos;
  return { history, logits };
}
