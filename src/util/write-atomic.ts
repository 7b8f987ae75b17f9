import * as fs from 'node:fs';
import * as path from 'node:path';
import { WasteError, fromSystemError } from './errors.js';
import { kindOf } from './read.js';

/**
 * Write a file so that a reader sees either the old version or the complete new one. Only a
 * regular file is replaced, or a new one written: a rename over a symlink, a device or a FIFO
 * would silently put a regular file in its place, so anything else at `file` is refused. The
 * temporary beside it is created exclusively, so a link planted at its name is never followed.
 */
export function writeFileAtomic(file: string, data: string | Uint8Array): void {
  refuseToReplace(file);
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp-${process.pid}`);
  try {
    let fd: number;
    try {
      fd = fs.openSync(tmp, 'wx');
    } catch (e) {
      // left by a process of the same id that is gone (ours removes its own): unlinked, never followed
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      fs.unlinkSync(tmp);
      fd = fs.openSync(tmp, 'wx');
    }
    try {
      fs.writeFileSync(fd, data);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, file);
  } catch (e) {
    try {
      fs.rmSync(tmp, { force: true });
    } catch {
      /* best effort */
    }
    throw fromSystemError(file, e);
  }
}

/** Refuse to replace what is at `file` unless it is a regular file (nothing there is fine). */
function refuseToReplace(file: string): void {
  let st: fs.Stats;
  try {
    st = fs.lstatSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw fromSystemError(file, e);
  }
  if (!st.isFile()) throw new WasteError('E_IO', `${file}: is ${kindOf(st)}; only a regular file is replaced (or a new one written)`);
}
