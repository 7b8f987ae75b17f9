import * as fs from 'node:fs';
import { WasteError, fromSystemError } from './errors.js';
import { processAlive } from './process-alive.js';
import { readText } from './read.js';

/** Lock files this process holds: a second taker in the same process is refused too (its pid is ours). */
const held = new Set<string>();
/** A millisecond's pause in synchronous code (while another process breaks a stale lock). */
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

/**
 * A lock file holding its owner's pid, created exclusively. One left by a process that no longer
 * runs is taken over; one held by a live process (or by this one) is refused with `busy(pid)`.
 */
export class PidLock {
  private released = false;

  private constructor(readonly file: string) {}

  static take(file: string, busy: (pid: number) => string): PidLock {
    const refuse = (pid: number) => new WasteError('E_STATE', `${busy(pid)} (its lock: ${file})`);
    if (held.has(file)) throw refuse(process.pid);
    const live = (pid: number | undefined): pid is number => pid !== undefined && pid !== process.pid && processAlive(pid);
    for (let attempt = 0; attempt < 500; attempt++) {
      if (create(file)) {
        held.add(file);
        return new PidLock(file);
      }
      const pid = ownerOf(file);
      if (live(pid)) throw refuse(pid);
      // stale (or gone): removed only under a second lock and after a second look, so a taker that
      // saw the dead owner cannot delete a lock another has created since
      const breaker = `${file}.break`;
      if (create(breaker)) {
        try {
          if (!live(ownerOf(file))) fs.rmSync(file, { force: true });
        } finally {
          fs.rmSync(breaker, { force: true });
        }
      } else {
        if (!live(ownerOf(breaker))) fs.rmSync(breaker, { force: true });
        Atomics.wait(PAUSE, 0, 0, 1);
      }
    }
    throw new WasteError('E_STATE', `could not take the lock ${file}`);
  }

  /** The live process holding `file`, if any (a stale lock names none). */
  static holder(file: string): number | undefined {
    if (held.has(file)) return process.pid;
    const pid = ownerOf(file);
    return pid !== undefined && pid !== process.pid && processAlive(pid) ? pid : undefined;
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    held.delete(this.file);
    fs.rmSync(this.file, { force: true });
  }
}

/**
 * Creates `file` holding our pid in one step: written to a file of our own, then hard-linked into
 * place, so no taker ever sees the lock empty. Where hard links are refused, an exclusive create.
 */
function create(file: string): boolean {
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    fs.writeFileSync(tmp, String(process.pid));
  } catch (e) {
    throw fromSystemError(tmp, e);
  }
  try {
    fs.linkSync(tmp, file);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return false;
    if (code !== 'EPERM' && code !== 'ENOTSUP' && code !== 'EOPNOTSUPP') throw fromSystemError(file, e);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  try {
    fs.writeFileSync(file, String(process.pid), { flag: 'wx' });
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw fromSystemError(file, e);
  }
}

function ownerOf(file: string): number | undefined {
  try {
    // a regular file of a few bytes: anything else in its place is not a lock of ours
    const pid = Number(readText(file, 64).trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
