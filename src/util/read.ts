import * as buffer from 'node:buffer';
import * as fs from 'node:fs';
import { WasteError, fromSystemError } from './errors.js';

/**
 * Reading the files the engine is given (a container's, a session, a tokenizer, `usage.waste`):
 * each must be a regular file, and no more than a stated number of bytes is ever read from one.
 * A symlink to /dev/zero, a FIFO or a directory in a file's place is one error, never a hang or
 * memory that grows until the process dies.
 */

/** Without it, opening a FIFO waits for a writer that may never come; a regular file ignores it. */
export const NONBLOCK = (fs.constants as Record<string, number>).O_NONBLOCK ?? 0;
/** One read call stays below Node's 2 GiB limit. */
const MAX_READ = 1 << 30;
/** For the files that state no bound of their own (tokenizers, chat templates, configs). */
export const DEFAULT_MAX_BYTES = 256 << 20;

/**
 * Refuse `fd` unless it is a regular file, and return its size. The check is on the open
 * descriptor, not the path, so the file checked is the file read even if the path changes.
 */
export function checkRegular(fd: number, file: string): number {
  let st: fs.Stats;
  try {
    st = fs.fstatSync(fd);
  } catch (e) {
    throw fromSystemError(file, e);
  }
  if (!st.isFile()) throw new WasteError('E_IO', `${file}: is ${kindOf(st)}, expected a regular file`);
  return st.size;
}

/** Open a regular file for reading (`flags` adds e.g. O_DIRECT); the caller closes `fd`. */
export function openRegular(file: string, flags = 0): { fd: number; size: number } {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | NONBLOCK | flags);
  } catch (e) {
    throw fromSystemError(file, e);
  }
  try {
    return { fd, size: checkRegular(fd, file) };
  } catch (e) {
    fs.closeSync(fd);
    throw e;
  }
}

/**
 * A regular file's bytes, at most `max` of them. The size fstat reports only sizes the first
 * allocation: the file is read until it ends, and refused as soon as it gives more than `max`.
 */
export function readBytes(file: string, max = DEFAULT_MAX_BYTES): Buffer {
  // one byte past the bound must fit in a Buffer too
  max = Math.min(max, buffer.constants.MAX_LENGTH - 1);
  const { fd, size } = openRegular(file);
  try {
    if (size > max) throw tooLarge(file, max);
    let buf = Buffer.allocUnsafe(Math.min(max + 1, Math.max(size + 1, 1 << 16)));
    let n = 0;
    for (;;) {
      if (n === buf.length) {
        if (n > max) break;
        const grown = Buffer.allocUnsafe(Math.min(max + 1, 2 * buf.length));
        buf.copy(grown, 0, 0, n);
        buf = grown;
      }
      let got: number;
      try {
        got = fs.readSync(fd, buf, n, Math.min(MAX_READ, buf.length - n), n);
      } catch (e) {
        throw fromSystemError(file, e);
      }
      if (got === 0) break;
      n += got;
    }
    if (n > max) throw tooLarge(file, max);
    return buf.subarray(0, n);
  } finally {
    fs.closeSync(fd);
  }
}

/** The most a person's input (a prompt, a text to measure) may be: far past any context. */
export const MAX_INPUT_BYTES = 256 << 20;

/**
 * Input a person hands in — a file, a pipe (`--file <(cmd)`), standard input — read to its end, at
 * most `max` bytes. Pipes are fine here, unlike for a model's files; a directory or a device is
 * not (/dev/zero would never end), and neither is more than `max`.
 */
export function readInput(file: string | 0, max = MAX_INPUT_BYTES): Buffer {
  const name = file === 0 ? 'standard input' : file;
  let fd: number;
  try {
    fd = file === 0 ? 0 : fs.openSync(file, 'r');
  } catch (e) {
    throw fromSystemError(name, e);
  }
  try {
    let st: fs.Stats;
    try {
      st = fs.fstatSync(fd);
    } catch (e) {
      throw fromSystemError(name, e);
    }
    if (!(st.isFile() || st.isFIFO() || st.isSocket())) throw new WasteError('E_IO', `${name}: is ${kindOf(st)}, expected a file or a pipe`);
    const chunks: Buffer[] = [];
    let n = 0;
    const buf = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      let got: number;
      try {
        got = fs.readSync(fd, buf, 0, buf.length, null);
      } catch (e) {
        // a non-blocking pipe with nothing yet: wait a little for its writer
        if ((e as NodeJS.ErrnoException).code === 'EAGAIN') {
          Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5);
          continue;
        }
        throw fromSystemError(name, e);
      }
      if (got === 0) break;
      n += got;
      if (n > max) throw new WasteError('E_ARG', `${name}: more than ${max} bytes, the most an input may be`);
      chunks.push(Buffer.from(buf.subarray(0, got)));
    }
    return Buffer.concat(chunks, n);
  } finally {
    if (fd !== 0) fs.closeSync(fd);
  }
}

/** A regular file's text (UTF-8), at most `max` bytes of it. */
export function readText(file: string, max = DEFAULT_MAX_BYTES): string {
  return readBytes(file, max).toString('utf8');
}

/** A JSON file, parsed; invalid JSON is one WasteError naming the file and what is wrong. */
export function readJson(file: string, max = DEFAULT_MAX_BYTES): unknown {
  const text = readText(file, max);
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new WasteError('E_FORMAT', `${file}: not valid JSON (${(e as Error).message})`);
  }
}

function tooLarge(file: string, max: number): WasteError {
  return new WasteError('E_FORMAT', `${file}: more than ${max} bytes, the most this file may hold`);
}

/** What a file that is not a regular one is, for an error (from stat, or lstat: then a link is named as such). */
export function kindOf(st: fs.Stats): string {
  if (st.isSymbolicLink()) return 'a symlink';
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isCharacterDevice()) return 'a character device';
  if (st.isBlockDevice()) return 'a block device';
  if (st.isSocket()) return 'a socket';
  return 'an unknown kind of file';
}
