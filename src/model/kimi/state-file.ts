import { crc32 } from '../../util/crc32.js';
import { WasteError } from '../../util/errors.js';
import type { KimiState, StateGeometry } from './state.js';

/**
 * A saved session: everything a sequence of a Kimi-family model (Kimi-Linear, Kimi K3) carries from one token to the next — each KDA
 * layer's recurrent state and convolution history, each MLA layer's latents for the positions
 * consumed — with the token history, so that continuing after a load is bit for bit continuing
 * without a stop. Little-endian:
 *
 *   magic "WSES", version, identity of the model (32 bytes), layers, KDA heads, head dim, conv
 *   kernel, MLA latent width, positions, logits saved (0 or vocab size), bytes of application
 *   data, then the token ids, the logits after the last token, the application data (a chat's
 *   messages, say; padded to 4 bytes), layer by layer the state (KDA: S then conv; MLA: positions
 *   × latent width), then a CRC32 of all that precedes it.
 *
 * A file is untrusted on load: its size, version, model identity and every shape are checked, and
 * the checksum, before the live state is touched.
 */
const MAGIC = 0x53455357; // 'WSES'
const VERSION = 1;
const HEADER = 4 * 2 + 32 + 4 * 8;
const MAX_META = 64 << 20;
const pad4 = (n: number) => (n + 3) & ~3;

function layerFloats(cfg: StateGeometry, pos: number): number[] {
  const { heads: H, headDim: D, convKernel: K } = cfg.kda;
  const W = cfg.mla.kvLoraRank + cfg.mla.qkRope;
  return cfg.layerKinds.map((k) => (k.attn === 'kda' ? H * D * D + 3 * H * D * (K - 1) : pos * W));
}

export function encodeState(
  cfg: StateGeometry,
  state: KimiState,
  history: readonly number[],
  logits: Float32Array | undefined,
  meta: Uint8Array,
  identity: Uint8Array,
): Uint8Array {
  if (meta.length > MAX_META) throw new WasteError('E_ARG', `${meta.length} bytes of session data is more than the ${MAX_META} a session file holds`);
  const pos = state.pos;
  if (history.length !== pos) throw new WasteError('E_STATE', `the session's history (${history.length} tokens) does not match its position (${pos})`);
  const nLogits = logits ? cfg.vocab : 0;
  const bytes = fileBytes(cfg, pos, nLogits, meta.length);
  const out = new Uint8Array(bytes);
  const dv = new DataView(out.buffer);
  writeHeader(dv, cfg, pos, nLogits, meta.length, identity);
  let o = HEADER;
  for (const id of history) {
    dv.setInt32(o, id, true);
    o += 4;
  }
  const put = (a: Float32Array) => {
    out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o);
    o += a.byteLength;
  };
  if (logits) put(logits.subarray(0, cfg.vocab));
  out.set(meta, o);
  o += pad4(meta.length);
  cfg.layerKinds.forEach((k, L) => {
    if (k.attn === 'kda') {
      put(state.kda[L]!.S);
      put(state.kda[L]!.conv);
    } else put(state.mla[L]!.cache.subarray(0, pos * state.latentWidth));
  });
  dv.setUint32(o, crc32(out.subarray(0, o)), true);
  return out;
}

/** The largest file a session of `limit` positions can be saved as: what a load reads at most. */
export function maxStateBytes(cfg: StateGeometry, limit: number): number {
  return fileBytes(cfg, limit, cfg.vocab, MAX_META);
}

function fileBytes(cfg: StateGeometry, pos: number, nLogits: number, nMeta: number): number {
  return HEADER + 4 * pos + 4 * nLogits + pad4(nMeta) + 4 * layerFloats(cfg, pos).reduce((a, b) => a + b, 0) + 4;
}

/** Check `data` and load it into `state`; returns the token history and last logits. Nothing is changed on failure. */
export function decodeState(
  cfg: StateGeometry,
  state: KimiState,
  data: Uint8Array,
  identity: Uint8Array,
  file: string,
  /** Called with the application data before anything is changed; may throw to refuse the file. */
  accept: (meta: Uint8Array) => void = () => {},
): { history: number[]; logits: Float32Array | undefined; meta: Uint8Array } {
  const bad = (what: string) => new WasteError('E_FORMAT', `${file}: ${what}`);
  if (data.length < HEADER + 4) throw bad(`${data.length} bytes is too short for a saved session`);
  const dv = new DataView(data.buffer, data.byteOffset, data.length);
  if (dv.getUint32(0, true) !== MAGIC) throw bad('not a saved session (bad magic number)');
  const version = dv.getUint32(4, true);
  if (version !== VERSION) throw bad(`saved by session format version ${version}; this build reads version ${VERSION}`);
  for (let i = 0; i < 32; i++)
    if (data[8 + i] !== identity[i]) throw new WasteError('E_ARG', `${file} was saved from another model; a session only loads into the model that saved it`);
  const expect = new DataView(new ArrayBuffer(HEADER));
  const pos = dv.getUint32(HEADER - 12, true);
  const nLogits = dv.getUint32(HEADER - 8, true);
  const nMeta = dv.getUint32(HEADER - 4, true);
  if (nLogits !== 0 && nLogits !== cfg.vocab) throw bad(`it holds ${nLogits} logits; this model's vocabulary is ${cfg.vocab}`);
  if (nMeta > MAX_META) throw bad(`${nMeta} bytes of session data is more than a session file holds`);
  writeHeader(expect, cfg, pos, nLogits, nMeta, identity);
  for (let o = 40; o < HEADER - 12; o += 4)
    if (dv.getUint32(o, true) !== expect.getUint32(o, true)) throw bad(`its shapes do not match this model's (field at byte ${o})`);
  if (pos > state.limit) throw bad(`it holds ${pos} positions, more than this session's context of ${state.limit}`);
  const bytes = fileBytes(cfg, pos, nLogits, nMeta);
  if (data.length !== bytes) throw bad(`${data.length} bytes, expected ${bytes} for ${pos} positions`);
  if (dv.getUint32(bytes - 4, true) !== crc32(data.subarray(0, bytes - 4))) throw bad('checksum mismatch (the file is damaged)');
  const history: number[] = [];
  let o = HEADER;
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
  const meta = data.slice(o, o + nMeta);
  o += pad4(nMeta);
  accept(meta);
  // every check passed: now the live state
  state.reset();
  cfg.layerKinds.forEach((k, L) => {
    if (k.attn === 'kda') {
      take(state.kda[L]!.S);
      take(state.kda[L]!.conv);
    } else take(state.mla[L]!.cache.subarray(0, pos * state.latentWidth));
  });
  state.pos = pos;
  return { history, logits, meta };
}

function writeHeader(dv: DataView, cfg: StateGeometry, pos: number, nLogits: number, nMeta: number, identity: Uint8Array): void {
  dv.setUint32(0, MAGIC, true);
  dv.setUint32(4, VERSION, true);
  for (let i = 0; i < 32; i++) dv.setUint8(8 + i, identity[i]);
  const { heads: H, headDim: D, convKernel: K } = cfg.kda;
  [cfg.layerKinds.length, H, D, K, cfg.mla.kvLoraRank + cfg.mla.qkRope, pos, nLogits, nMeta].forEach((v, i) => dv.setUint32(40 + 4 * i, v, true));
}
