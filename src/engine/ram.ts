import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

/**
 * RAM the engine may plan for: physical memory, or less when the process runs under a cgroup
 * memory limit (a container) — the capacity an explicit budget is checked against — and, for the
 * default budget, what is available now: MemAvailable, or the cgroup's headroom if that is less.
 *
 * Why the default may follow available RAM when a budget never does: how much cache the engine
 * holds decides its speed, never its answer (a record is the same bytes from any slot), so a
 * default that changes from one open to the next changes no logits; and a default sized to
 * capacity alone either leaves most of an idle machine unused or, sized larger, pages when other
 * processes hold the memory. An explicit budget stays a fixed ceiling.
 */
export interface UsableRam {
  physical: number;
  /** The tightest cgroup limit found, if any. */
  cgroupLimit?: number;
  usable: number;
  /** Bytes available now (MemAvailable, or the cgroup's headroom when less); absent when unknown. */
  available?: number;
  /** Where `available` came from: "MemAvailable" or "cgroup". */
  availableFrom?: 'MemAvailable' | 'cgroup';
}

const UNLIMITED = 2 ** 60;

/** Where the readers look (tests point them at fake files). */
export interface RamFiles {
  procCgroup?: string;
  cgroupRoot?: string;
  meminfo?: string;
  physical?: number;
}

export function usableRam(opts: RamFiles = {}): UsableRam {
  const physical = opts.physical ?? os.totalmem();
  const procCgroup = opts.procCgroup ?? '/proc/self/cgroup';
  const root = opts.cgroupRoot ?? '/sys/fs/cgroup';
  const limit = cgroupLimit(procCgroup, root);
  const usable = limit !== undefined ? Math.min(physical, limit) : physical;
  const out: UsableRam = { physical, cgroupLimit: limit, usable };
  const a = availableRam({ ...opts, procCgroup, cgroupRoot: root });
  if (a) {
    out.available = Math.min(a.bytes, usable);
    out.availableFrom = a.from;
  }
  return out;
}

/**
 * Memory available now: /proc/meminfo's MemAvailable (what the kernel estimates can be had without
 * swapping: free memory plus reclaimable page cache), or less when a cgroup limit on the path
 * leaves less headroom (limit − usage, usage not counting the cgroup's inactive file pages, which
 * the kernel reclaims first). Undefined when neither can be read.
 */
export function availableRam(opts: RamFiles = {}): { bytes: number; from: 'MemAvailable' | 'cgroup' } | undefined {
  let best: { bytes: number; from: 'MemAvailable' | 'cgroup' } | undefined;
  try {
    const m = /^MemAvailable:\s+(\d+) kB/m.exec(fs.readFileSync(opts.meminfo ?? '/proc/meminfo', 'utf8'));
    if (m) best = { bytes: Number(m[1]) * 1024, from: 'MemAvailable' };
  } catch {
    /* not Linux */
  }
  const head = cgroupHeadroom(opts.procCgroup ?? '/proc/self/cgroup', opts.cgroupRoot ?? '/sys/fs/cgroup');
  if (head !== undefined && (!best || head < best.bytes)) best = { bytes: head, from: 'cgroup' };
  return best;
}

/** The least headroom (limit − usage + inactive file pages) of any limited cgroup on this process's path. */
export function cgroupHeadroom(procCgroup: string, root: string): number | undefined {
  let best: number | undefined;
  forEachLimitDir(procCgroup, root, (dir, v2) => {
    const limits = v2 ? [readLimit(path.join(dir, 'memory.max')), readLimit(path.join(dir, 'memory.high'))] : [readLimit(path.join(dir, 'memory.limit_in_bytes'))];
    const finite = limits.filter((v): v is number => v !== undefined && v > 0 && v < UNLIMITED);
    if (!finite.length) return;
    const used = readLimit(path.join(dir, v2 ? 'memory.current' : 'memory.usage_in_bytes'));
    if (used === undefined) return;
    const inactive = statField(path.join(dir, 'memory.stat'), v2 ? 'inactive_file' : 'total_inactive_file') ?? 0;
    const head = Math.max(0, Math.min(...finite) - Math.max(0, used - inactive));
    best = best === undefined ? head : Math.min(best, head);
  });
  return best;
}

function statField(file: string, field: string): number | undefined {
  try {
    const m = new RegExp(`^${field} (\\d+)$`, 'm').exec(fs.readFileSync(file, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * PSI of memory: the share of the last 10 s in which some task stalled on memory
 * (/proc/pressure/memory "some avg10", in percent); undefined without PSI.
 */
export function memoryPressure(file = '/proc/pressure/memory'): number | undefined {
  try {
    const m = /^some avg10=([\d.]+)/m.exec(fs.readFileSync(file, 'utf8'));
    return m ? Number(m[1]) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The smallest finite memory limit on the path from this process's cgroup up to the root: cgroup v2
 * (`memory.max`, `memory.high`) and v1 (`memory.limit_in_bytes`). Paths with ".." are ignored.
 */
export function cgroupLimit(procCgroup: string, root: string): number | undefined {
  let best: number | undefined;
  const take = (v: number | undefined) => {
    if (v !== undefined && v > 0 && v < UNLIMITED) best = best === undefined ? v : Math.min(best, v);
  };
  forEachLimitDir(procCgroup, root, (dir, v2) => {
    if (v2) {
      take(readLimit(path.join(dir, 'memory.max')));
      take(readLimit(path.join(dir, 'memory.high')));
    } else take(readLimit(path.join(dir, 'memory.limit_in_bytes')));
  });
  return best;
}

/** Each cgroup directory (v2: true) on the path from this process's cgroup up to the root. */
function forEachLimitDir(procCgroup: string, root: string, fn: (dir: string, v2: boolean) => void): void {
  let text: string;
  try {
    text = fs.readFileSync(procCgroup, 'utf8');
  } catch {
    return;
  }
  for (const line of text.split('\n')) {
    const parts = line.split(':');
    if (parts.length < 3) continue;
    const controllers = parts[1];
    const rel = parts.slice(2).join(':');
    if (!rel.startsWith('/') || rel.split('/').includes('..')) continue;
    if (parts[0] === '0' && controllers === '') {
      for (const mount of [root, path.join(root, 'unified')]) for (const dir of ancestors(mount, rel)) fn(dir, true);
    } else if (controllers.split(',').includes('memory')) {
      for (const dir of ancestors(path.join(root, 'memory'), rel)) fn(dir, false);
    }
  }
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
