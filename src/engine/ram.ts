import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * RAM the engine may plan for: physical memory, or less when the process runs under a cgroup
 * memory limit (a container). Capacity only, never "currently free": free memory moves, and a plan
 * that follows it would change the answer to "how much cache" from one open to the next.
 */
export interface UsableRam {
  physical: number;
  /** The tightest cgroup limit found, if any. */
  cgroupLimit?: number;
  usable: number;
}

const UNLIMITED = 2 ** 60;

export function usableRam(opts: { procCgroup?: string; cgroupRoot?: string; physical?: number } = {}): UsableRam {
  const physical = opts.physical ?? os.totalmem();
  const limit = cgroupLimit(opts.procCgroup ?? '/proc/self/cgroup', opts.cgroupRoot ?? '/sys/fs/cgroup');
  return { physical, cgroupLimit: limit, usable: limit !== undefined ? Math.min(physical, limit) : physical };
}

/**
 * The smallest finite memory limit on the path from this process's cgroup up to the root: cgroup v2
 * (`memory.max`, `memory.high`) and v1 (`memory.limit_in_bytes`). Paths with ".." are ignored.
 */
export function cgroupLimit(procCgroup: string, root: string): number | undefined {
  let text: string;
  try {
    text = fs.readFileSync(procCgroup, 'utf8');
  } catch {
    return undefined;
  }
  let best: number | undefined;
  const take = (v: number | undefined) => {
    if (v !== undefined && v > 0 && v < UNLIMITED) best = best === undefined ? v : Math.min(best, v);
  };
  for (const line of text.split('\n')) {
    const parts = line.split(':');
    if (parts.length < 3) continue;
    const controllers = parts[1];
    const rel = parts.slice(2).join(':');
    if (!rel.startsWith('/') || rel.split('/').includes('..')) continue;
    if (parts[0] === '0' && controllers === '') {
      for (const mount of [root, path.join(root, 'unified')])
        for (const dir of ancestors(mount, rel)) {
          take(readLimit(path.join(dir, 'memory.max')));
          take(readLimit(path.join(dir, 'memory.high')));
        }
    } else if (controllers.split(',').includes('memory')) {
      for (const dir of ancestors(path.join(root, 'memory'), rel)) take(readLimit(path.join(dir, 'memory.limit_in_bytes')));
    }
  }
  return best;
}

/** mount/rel, then each parent up to and including the mount itself. */
function ancestors(mount: string, rel: string): string[] {
  const out: string[] = [];
  const parts = rel.split('/').filter(Boolean);
  for (let i = parts.length; i >= 0; i--) out.push(path.join(mount, ...parts.slice(0, i)));
  return out;
}

function readLimit(file: string): number | undefined {
  try {
    const s = fs.readFileSync(file, 'utf8').trim();
    if (s === 'max' || !/^\d+$/.test(s)) return undefined;
    return Number(s);
  } catch {
    return undefined;
  }
}
