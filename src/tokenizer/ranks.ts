import { WasteError } from '../util/errors.js';

/**
 * A tiktoken rank file (Kimi's `tiktoken.model`, a container's `tokenizer.model`): one token per
 * line, "base64(bytes) rank". Untrusted: every line is checked, and a rank or a byte string given
 * twice is an error, as is a file too large to be a vocabulary.
 */
export interface Ranks {
  /** Rank of a byte string, keyed by the bytes as a latin1 string (one char per byte). */
  byBytes: Map<string, number>;
  /** Bytes of each rank (undefined for a rank the file skips). */
  bytes: (Uint8Array | undefined)[];
  /** One past the highest rank. */
  size: number;
}

const MAX_FILE = 64 << 20;
const MAX_RANK = 1 << 24;

export function parseRanks(data: Uint8Array, file: string): Ranks {
  if (data.length > MAX_FILE) throw new WasteError('E_FORMAT', `${file}: ${data.length} bytes is too large for a token vocabulary`);
  const text = Buffer.from(data.buffer, data.byteOffset, data.length).toString('latin1');
  const byBytes = new Map<string, number>();
  const bytes: (Uint8Array | undefined)[] = [];
  let size = 0;
  let line = 0;
  for (const raw of text.split('\n')) {
    line++;
    const s = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (!s) continue;
    const m = /^([A-Za-z0-9+/]*={0,2}) (\d{1,9})$/.exec(s);
    if (!m) throw new WasteError('E_FORMAT', `${file}: line ${line} is not "base64 rank"`);
    const rank = Number(m[2]);
    if (rank >= MAX_RANK) throw new WasteError('E_FORMAT', `${file}: line ${line}: rank ${rank} is out of range`);
    const b = Buffer.from(m[1], 'base64');
    if (b.length === 0 || b.toString('base64') !== m[1]) throw new WasteError('E_FORMAT', `${file}: line ${line}: "${m[1].slice(0, 20)}" is not canonical base64 of at least one byte`);
    const key = b.toString('latin1');
    if (byBytes.has(key)) throw new WasteError('E_FORMAT', `${file}: line ${line}: these bytes already have rank ${byBytes.get(key)}`);
    if (bytes[rank]) throw new WasteError('E_FORMAT', `${file}: line ${line}: rank ${rank} is given twice`);
    byBytes.set(key, rank);
    bytes[rank] = new Uint8Array(b);
    size = Math.max(size, rank + 1);
  }
  if (!byBytes.size) throw new WasteError('E_FORMAT', `${file}: no tokens`);
  // byte-level BPE must be able to spell any input: every single byte needs a rank
  for (let b = 0; b < 256; b++)
    if (!byBytes.has(String.fromCharCode(b))) throw new WasteError('E_FORMAT', `${file}: byte 0x${b.toString(16).padStart(2, '0')} has no token, so some text could not be encoded`);
  return { byBytes, bytes, size };
}

/** Token byte strings in rank order (index = rank) as a rank file that parseRanks reads back. */
export function rankFileText(ranks: Uint8Array[]): string {
  return ranks.map((b, i) => `${Buffer.from(b).toString('base64')} ${i}`).join('\n') + '\n';
}
