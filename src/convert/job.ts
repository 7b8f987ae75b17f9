import * as fs from 'node:fs';
import * as path from 'node:path';
import type { TrunkIndexEntry } from '../container/write.js';
import { writeFileAtomic } from '../util/write-atomic.js';
import { WasteError, fromSystemError } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { CONVERTER_VERSION, type ConvertSettings } from './plan.js';
import { readText } from '../util/read.js';
import { PidLock } from '../util/pid-lock.js';

/**
 * A conversion in progress lives in `OUT.partial/`, with `convert.json` recording which units
 * (the trunk, each MoE layer, the merged codebooks) are finished. A unit's files are complete and
 * renamed into place before the record says so, so a run killed at any moment resumes from the
 * last finished unit; a run with other input or settings starts over. The record stays in the
 * published container as its provenance, in a form that does not depend on how often the job
 * was interrupted — nor on how the input was read: the identity a resume must match (file times
 * for a directory, the hub's hashes for a pull) is kept beside it in `convert.identity`, which is
 * never published, so `waste pull` and `waste convert` of one checkpoint give the same bytes.
 */
export const STATE_FILE = 'convert.json';
const LOCK_FILE = 'convert.lock';
const IDENTITY_FILE = 'convert.identity';

/**
 * Where the identity waits while the finished directory is renamed into place: outside it (what is
 * inside is published), so a run killed between the two steps still resumes rather than starting over.
 */
export const identityAside = (dir: string): string => `${dir}.identity`;

export interface JobState {
  converter: number;
  settings: ConvertSettings;
  trunk: TrunkIndexEntry[] | null;
  /** MoE layers whose bank and codebook part are finished. */
  layers: number[];
  /** codebooks.bin is written (the per-layer parts may be gone). */
  codebooks: boolean;
}

export class Job {
  private lockFile: PidLock | undefined;

  private constructor(
    readonly dir: string,
    readonly state: JobState,
    readonly resumed: boolean,
  ) {}

  /**
   * Open (or start) the partial conversion in `dir` for this identity. A partial directory with a
   * different identity, or without a readable record, is emptied first; `log` says so.
   */
  static open(dir: string, identity: string, settings: ConvertSettings, log: (line: string) => void): Job {
    let prev: JobState | undefined;
    let prevIdentity: string | undefined;
    try {
      if (fs.existsSync(dir)) {
        if (!fs.statSync(dir).isDirectory()) throw new WasteError('E_ARG', `${dir} exists and is not a directory; remove it`);
        prev = readState(path.join(dir, STATE_FILE));
        // a partial from before the identity had its own file kept it in the record
        const legacy = prev as (JobState & { identity?: unknown }) | undefined;
        prevIdentity = readIdentity(path.join(dir, IDENTITY_FILE)) ?? readIdentity(identityAside(dir)) ?? (typeof legacy?.identity === 'string' ? legacy.identity : undefined);
        if (legacy && 'identity' in legacy) delete legacy.identity;
      } else fs.mkdirSync(dir, { recursive: true });
    } catch (e) {
      throw fromSystemError(dir, e);
    }
    const job = prev && prevIdentity === identity ? new Job(dir, prev, true) : new Job(dir, fresh(settings), false);
    job.lock();
    if (!job.resumed) {
      const stale = fs.readdirSync(dir).filter((f) => f !== LOCK_FILE);
      if (stale.length) {
        log(`${dir} holds an earlier conversion of other input or settings; starting over`);
        for (const f of stale) fs.rmSync(path.join(dir, f), { recursive: true, force: true });
      }
      // the identity first: a record without one is never resumed
      writeFileAtomic(path.join(dir, IDENTITY_FILE), identity + '\n');
      job.save();
    }
    // resumed from the identity set aside by a run killed while publishing: back inside, then the copy goes
    if (job.resumed && !fs.existsSync(path.join(dir, IDENTITY_FILE))) writeFileAtomic(path.join(dir, IDENTITY_FILE), identity + '\n');
    // the record rewritten without a legacy identity, so the published convert.json is the same either way
    if (job.resumed) job.save();
    fs.rmSync(identityAside(dir), { force: true });
    return job;
  }

  /**
   * Publish the finished directory at `out` with `publish` (one rename): the identity is moved out
   * of it first (aside, so a kill in between still resumes) and dropped once the rename is done.
   */
  publish(publish: () => void): void {
    const inside = path.join(this.dir, IDENTITY_FILE);
    const aside = identityAside(this.dir);
    writeFileAtomic(aside, readText(inside, 256));
    fs.rmSync(inside, { force: true });
    this.unlock();
    publish();
    fs.rmSync(aside, { force: true });
  }

  /** Record progress: atomically, so the record is always one whole version. */
  save(): void {
    writeFileAtomic(path.join(this.dir, STATE_FILE), JSON.stringify(this.state, null, 1) + '\n');
  }

  /**
   * One conversion per partial directory at a time: a second one would interleave writes. A lock
   * left by a process that no longer runs is taken over.
   */
  private lock(): void {
    this.lockFile = PidLock.take(path.join(this.dir, LOCK_FILE), (pid) =>
      pid === process.pid ? `another conversion in this process is writing ${this.dir}` : `another conversion (process ${pid}) is writing ${this.dir}; wait for it or stop it`,
    );
  }

  unlock(): void {
    this.lockFile?.release();
    this.lockFile = undefined;
  }

  /** Remove everything in the directory that is not in `keep` (temporaries of interrupted units, spent parts). */
  prune(keep: Set<string>): void {
    for (const f of fs.readdirSync(this.dir)) if (!keep.has(f) && f !== LOCK_FILE && f !== IDENTITY_FILE) fs.rmSync(path.join(this.dir, f), { recursive: true, force: true });
  }
}

function fresh(settings: ConvertSettings): JobState {
  return { converter: CONVERTER_VERSION, settings, trunk: null, layers: [], codebooks: false };
}

function readIdentity(file: string): string | undefined {
  try {
    const s = readText(file, 256).trim();
    return /^[0-9a-f]{64}$/.test(s) ? s : undefined;
  } catch {
    return undefined;
  }
}

/** The record, if it is one this converter wrote; anything else means "start over". */
function readState(file: string): JobState | undefined {
  try {
    const s: unknown = JSON.parse(readText(file, 16 << 20));
    if (!isObject(s) || s.converter !== CONVERTER_VERSION) return undefined;
    if (!(s.trunk === null || Array.isArray(s.trunk)) || !Array.isArray(s.layers) || !s.layers.every((l) => Number.isInteger(l)) || typeof s.codebooks !== 'boolean')
      return undefined;
    return s as unknown as JobState;
  } catch {
    return undefined;
  }
}
