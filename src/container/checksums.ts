import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import { WasteError, fromSystemError } from '../util/errors.js';
import { openRegular } from '../util/read.js';

/**
 * `checksums` in manifest.json: the SHA-256 and length of the files no per-record CRC32 covers,
 * `{"trunk.bin": {"sha256": "<64 hex digits>", "bytes": N}, "codebooks.bin": {…}}`. Not part of
 * format v0 as the C engine defines it: that engine reads the manifest's keys by name and never
 * reads this one, so a container that has it runs there unchanged.
 */
export const CHECKSUMS_KEY = 'checksums';

export interface FileChecksum {
  /** Lower-case hex. */
  sha256: string;
  bytes: number;
}

const CHUNK = 16 << 20;

/** The checksum of a regular file, read through once in chunks; `onBytes` is told each chunk's length. */
export function fileChecksum(file: string, onBytes: (n: number) => void = () => {}): FileChecksum {
  const { fd } = openRegular(file);
  try {
    return fdChecksum(fd, file, onBytes);
  } finally {
    fs.closeSync(fd);
  }
}

/** The checksum of an open file (`file` names it in errors), from its first byte to its end. */
export function fdChecksum(fd: number, file: string, onBytes: (n: number) => void = () => {}): FileChecksum {
  const h = crypto.createHash('sha256');
  const buf = Buffer.allocUnsafe(CHUNK);
  let bytes = 0;
  for (;;) {
    let got: number;
    try {
      got = fs.readSync(fd, buf, 0, CHUNK, bytes);
    } catch (e) {
      throw fromSystemError(file, e);
    }
    if (got === 0) break;
    h.update(buf.subarray(0, got));
    bytes += got;
    onBytes(got);
  }
  return { sha256: h.digest('hex'), bytes };
}

/**
 * `manifest_sha256` in manifest.json: the SHA-256 of the manifest itself, which no other checksum
 * covers and which says what every other byte means (the config, where each tensor lies, which
 * tensors there are). It is taken over the document without this key, as JSON.stringify writes it
 * (no whitespace), so it survives being re-indented and not a changed value. Like `checksums`,
 * this engine's addition: the C engine never reads it.
 */
export const MANIFEST_DIGEST_KEY = 'manifest_sha256';

/** The digest `manifest_sha256` holds for a manifest document (its value in `doc`, if any, left out). */
export function manifestDigest(doc: Record<string, unknown>): string {
  const { [MANIFEST_DIGEST_KEY]: _, ...rest } = doc;
  return crypto.createHash('sha256').update(JSON.stringify(rest)).digest('hex');
}

/** The checksum of bytes already in memory. */
export function bytesChecksum(data: Uint8Array): FileChecksum {
  return { sha256: crypto.createHash('sha256').update(data).digest('hex'), bytes: data.length };
}

/** A file's length against the manifest's record of it: checked at every open (it costs nothing). */
export function checkLength(name: string, want: FileChecksum, bytes: number): void {
  if (bytes !== want.bytes)
    throw new WasteError(
      'E_IO',
      `${name}: ${bytes} bytes, but manifest.json's checksums say ${want.bytes}; the file is ${bytes < want.bytes ? 'truncated' : 'longer than written'}`,
    );
}

/** A file's length and digest against the manifest's record of them. */
export function checkChecksum(name: string, want: FileChecksum, got: FileChecksum): void {
  checkLength(name, want, got.bytes);
  if (got.sha256 !== want.sha256) throw new WasteError('E_IO', `${name}: SHA-256 mismatch with manifest.json's checksums (the file is damaged)`);
}
