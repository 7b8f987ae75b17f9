import * as fs from 'node:fs';
import { WasteError, fromSystemError } from './errors.js';
import { processAlive } from './process-alive.js';
import { readText } from './read.js';

/** Lock files this process holds: a second taker in the same process is refused too (its pid is ours). */
const held = new Set<string>();

/**
 * A lock file holding its owner's pid, created exclusively. One left by a process that no longer
 * runs is taken over; one held by a live process (or by this one) is refused with `busy(pid)`.
 */
export class PidLock {
  private released = false;

  private constructor(readonly file: string) {}

  static take(file: string, busy: (pid: number) => string): PidLock {
    if (held.has(file)) throw new WasteError('E_STATE', busy(process.pid));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        fs.writeFileSync(file, String(process.pid), { flag: 'wx' });
        held.add(file);
        return new PidLock(file);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw fromSystemError(file, e);
      }
      const pid = ownerOf(file);
      if (pid !== undefined && pid !== process.pid && processAlive(pid)) throw new WasteError('E_STATE', busy(pid));
      fs.rmSync(file, { force: true });
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

function ownerOf(file: string): number | undefined {
  try {
    // a regular file of a few bytes: anything else in its place is not a lock of ours
    const pid = Number(readText(file, 64).trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}
