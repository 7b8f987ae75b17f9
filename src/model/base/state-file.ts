import { crc32 } from '../../util/crc32.js';
import { WasteError } from '../../util/errors.js';

/**
 * The envelope every saved session of the families over the shared base has (the transformer's
 * "WSES", DeepSeek's "WSEL", Qwen3-Next's "WSQN"), little-endian:
 *
 *   magic, version, the model's identity (32 bytes), the header's words — the family's shapes,
 *   with positions, logits saved (0 or vocab size) and bytes of application data among them —;
 *   then the token ids, the logits, the application data (padded to 4 bytes), the state's floats
 *   in the family's order, and a CRC32 of all that precedes it.
 *
 * A file is untrusted on load: its size, version, model identity and every header word are
 * checked, and the checksum, before the live state is touched. What differs between families is
 * a SessionLayout; the checks and the byte handling are here once.
 */
export interface SessionLayout<S> {
  magic: number;
  version: number;
  /** What a bad magic number says the file is not: "a saved session" and this. */
  kind: string;
  vocab: number;
  /** The header's words after the identity for `pos` positions; the same count whatever `pos`. */
  words(pos: number, nLogits: number, nMeta: number): number[];
  /** Where positions, logits and data bytes sit among the words. */
  at: { pos: number; logits: number; meta: number };
  /** The error for a header word that is not this session's (at byte `byte`). */
  shapes(byte: number): string;
  /** Floats of state a file of `pos` positions holds. */
  floats(pos: number): number;
  /** The state's arrays to save or fill for `pos` positions, in file order. */
  arrays(state: S, pos: number): Iterable<Float32Array>;
}

/** The most application data a session file holds. */
export const MAX_SESSION_META = 64 << 20;
const IDENTITY = 8;
const WORDS = 40;
const pad4 = (n: number) => (n + 3) & ~3;

function headerBytes<S>(l: SessionLayout<S>): number {
  return WORDS + 4 * l.words(0, 0, 0).length;
}

/** The bytes of a file of `pos` positions. */
export function sessionFileBytes<S>(l: SessionLayout<S>, pos: number, nLogits: number, nMeta: number): number {
  return headerBytes(l) + 4 * pos + 4 * nLogits + pad4(nMeta) + 4 * l.floats(pos) + 4;
}

function writeHeader<S>(dv: DataView, l: SessionLayout<S>, pos: number, nLogits: number, nMeta: number, identity: Uint8Array): void {
  dv.setUint32(0, l.magic, true);
  dv.setUint32(4, l.version, true);
  for (let i = 0; i < 32; i++) dv.setUint8(IDENTITY + i, identity[i]);
  l.words(pos, nLogits, nMeta).forEach((v, i) => dv.setUint32(WORDS + 4 * i, v, true));
}

export function encodeSession<S extends { pos: number }>(l: SessionLayout<S>, state: S, history: readonly number[], logits: Float32Array | undefined, meta: Uint8Array, identity: Uint8Array): Uint8Array {
  if (meta.length > MAX_SESSION_META) throw new WasteError('E_ARG', `${meta.length} bytes of session data is more than the ${MAX_SESSION_META} a session file holds`);
  const pos = state.pos;
  if (history.length !== pos) throw new WasteError('E_STATE', `the session's history (${history.length} tokens) does not match its position (${pos})`);
  const nLogits = logits ? l.vocab : 0;
  const out = new Uint8Array(sessionFileBytes(l, pos, nLogits, meta.length));
  const dv = new DataView(out.buffer);
  writeHeader(dv, l, pos, nLogits, meta.length, identity);
  let o = headerBytes(l);
  for (const id of history) dv.setInt32((o += 4) - 4, id, true);
  const put = (a: Float32Array) => {
    out.set(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), o);
    o += a.byteLength;
  };
  if (logits) put(logits.subarray(0, l.vocab));
  out.set(meta, o);
  o += pad4(meta.length);
  for (const a of l.arrays(state, pos)) put(a);
  dv.setUint32(o, crc32(out.subarray(0, o)), true);
  return out;
}

/** Check `data` and load it into `state`; returns the token history and last logits. Nothing is changed on failure. */
export function decodeSession<S extends { pos: number; limit: number; reset(): void }>(
  l: SessionLayout<S>,
  state: S,
  data: Uint8Array,
  identity: Uint8Array,
  file: string,
  accept: (meta: Uint8Array) => void,
): { history: number[]; logits: Float32Array | undefined } {
  const bad = (what: string) => new WasteError('E_FORMAT', `${file}: ${what}`);
  const H = headerBytes(l);
  if (data.length < H + 4) throw bad(`${data.length} bytes is too short for a saved session`);
  const dv = new DataView(data.buffer, data.byteOffset, data.length);
  if (dv.getUint32(0, true) !== l.magic) throw bad(`not a saved session${l.kind} (bad magic number)`);
  const version = dv.getUint32(4, true);
  if (version !== l.version) throw bad(`saved by session format version ${version}; this model's sessions are version ${l.version}`);
  for (let i = 0; i < 32; i++) if (data[IDENTITY + i] !== identity[i]) throw new WasteError('E_ARG', `${file} was saved from another model; a session only loads into the model that saved it`);
  const word = (i: number) => dv.getUint32(WORDS + 4 * i, true);
  const pos = word(l.at.pos);
  const nLogits = word(l.at.logits);
  const nMeta = word(l.at.meta);
  if (nLogits !== 0 && nLogits !== l.vocab) throw bad(`it holds ${nLogits} logits; this model's vocabulary is ${l.vocab}`);
  if (nMeta > MAX_SESSION_META) throw bad(`${nMeta} bytes of session data is more than a session file holds`);
  if (pos > state.limit) throw bad(`it holds ${pos} positions, more than this session's context of ${state.limit}`);
  const expect = new DataView(new ArrayBuffer(H));
  writeHeader(expect, l, pos, nLogits, nMeta, identity);
  for (let o = WORDS; o < H; o += 4) if (dv.getUint32(o, true) !== expect.getUint32(o, true)) throw bad(l.shapes(o));
  const bytes = sessionFileBytes(l, pos, nLogits, nMeta);
  if (data.length !== bytes) throw bad(`${data.length} bytes, expected ${bytes} for ${pos} positions`);
  if (dv.getUint32(bytes - 4, true) !== crc32(data.subarray(0, bytes - 4))) throw bad('checksum mismatch (the file is damaged)');
  const history: number[] = [];
  let o = H;
  for (let i = 0; i < pos; i++, o += 4) {
    const id = dv.getInt32(o, true);
    if (id < 0 || id >= l.vocab) throw bad(`token ${i} (${id}) is outside the vocabulary`);
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
  for (const a of l.arrays(state, pos)) take(a);
  state.pos = pos;
  return { history, logits };
}
