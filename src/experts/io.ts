import * as fs from 'node:fs';
import type { Container } from '../container/open.js';
import type { Arena } from '../memory/arena.js';
import { WasteError } from '../util/errors.js';
import { NONBLOCK, checkRegular, openRegular } from '../util/read.js';

/**
 * Expert banks opened for streaming: with O_DIRECT on Linux so reads bypass the page cache (the
 * engine owns caching), probed rather than assumed — a read of one aligned page must succeed, and a
 * misaligned one must be refused, which only happens when the bypass is really engaged. Anywhere
 * the probe fails the banks are read through the page cache, and `direct` says so.
 */
export interface StreamFiles {
  /** One descriptor per MoE layer's bank. */
  fds: Map<number, number>;
  /** True when every bank bypasses the page cache. */
  direct: boolean;
  /** Why the bypass is off, when it is. */
  note?: string;
  close(): void;
}

export function openStreamFiles(c: Container, wantDirect: boolean, probe: { arena: Arena; off: number }): StreamFiles {
  const fds = new Map<number, number>();
  const O_DIRECT = (fs.constants as Record<string, number>).O_DIRECT;
  let direct = wantDirect && O_DIRECT !== undefined && process.platform === 'linux';
  let note: string | undefined = !wantDirect
    ? 'page-cache bypass turned off'
    : O_DIRECT === undefined || process.platform !== 'linux'
      ? `no O_DIRECT on ${process.platform}; reads go through the page cache`
      : undefined;
  const close = () => {
    for (const fd of fds.values()) fs.closeSync(fd);
    fds.clear();
  };
  try {
    for (const [layer, bank] of c.banks) {
      let fd = -1;
      if (direct) {
        try {
          fd = fs.openSync(bank.path, fs.constants.O_RDONLY | O_DIRECT | NONBLOCK);
          checkRegular(fd, bank.path);
          const why = probeDirect(fd, probe);
          if (why) {
            fs.closeSync(fd);
            fd = -1;
            direct = false;
            note = `${bank.file}: ${why}; reads go through the page cache`;
          }
        } catch (e) {
          if (fd >= 0) fs.closeSync(fd);
          if (e instanceof WasteError) throw e;
          fd = -1;
          direct = false;
          note = `${bank.file}: O_DIRECT open failed (${(e as NodeJS.ErrnoException).code ?? e}); reads go through the page cache`;
        }
      }
      if (fd < 0) fd = openRegular(bank.path).fd;
      fds.set(layer, fd);
    }
  } catch (e) {
    close();
    throw e;
  }
  return { fds, direct, note, close };
}

/** undefined when the bypass is engaged; otherwise why not. */
function probeDirect(fd: number, probe: { arena: Arena; off: number }): string | undefined {
  const page = probe.arena.u8(probe.off, 8192);
  try {
    if (fs.readSync(fd, page, 0, 4096, 0) !== 4096) return 'an aligned probe read came back short';
  } catch (e) {
    return `an aligned probe read failed (${(e as NodeJS.ErrnoException).code ?? e})`;
  }
  try {
    fs.readSync(fd, page, 1, 4096, 0);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EINVAL') return undefined;
    return `a misaligned probe read failed oddly (${(e as NodeJS.ErrnoException).code ?? e})`;
  }
  return 'the file system accepts O_DIRECT but does not bypass the page cache';
}
