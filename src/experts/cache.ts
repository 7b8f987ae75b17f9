import * as fs from 'node:fs';
import type { Container } from '../container/open.js';
import type { Arena } from '../memory/arena.js';
import { touchPages } from '../memory/touch.js';
import { WasteError } from '../util/errors.js';
import { type HotEntry, mergeHotlist, readHotlist, writeHotlist } from './hotlist.js';
import { ReaderPool, Status } from './readers.js';
import type { StreamFiles } from './io.js';

/**
 * The expert cache: fixed slots in arenas, each holding one expert record, filled by one read
 * straight into the slot. LFRU eviction by default: sample a few slots and evict the least used,
 * "use" being the slot's hits per unit of time since its record was loaded (the count restarts when
 * the slot is reused); LRU (the least recently used of the sample) as an option; and LFU-DA, which
 * remembers how often each expert was ever asked for (see PHASE_BONUS). Slots in use or in flight
 * are pinned. Hits and misses count demand requests only; lookahead reads are counted apart.
 *
 * Why a rate and not a plain count: on the real Kimi-Linear routing trace a plain hit count lost to
 * LRU (35.9 % against 41.4 % hits at a cache of 6 % of the experts) because records that piled up
 * hits early were never evicted; hits per time since loading gets 44.3 % (docs/LEARNED.md).
 *
 * What it holds decides speed, never the answer: a record is the same bytes from any slot.
 */
export type CachePolicy = 'lfru' | 'lru' | 'lfuda';

export interface CacheSlot {
  readonly index: number;
  readonly arena: Arena;
  readonly off: number;
  readonly view: Uint8Array;
  key: number;
  hits: number;
  last: number;
  /** Clock when the record was loaded. */
  born: number;
  pins: number;
  /** Brought in by lookahead and not yet asked for. */
  speculative: boolean;
  /** Header checked since the record landed. */
  checked: boolean;
  /** LFU-DA priority: the aging level when last used plus the expert's request count. */
  prio: number;
}

export interface CacheStats {
  slots: number;
  hits: number;
  misses: number;
  /** Bytes read for demand misses. */
  bytesRead: number;
  /** Lookahead reads issued, and how many of them a later demand used. */
  speculativeReads: number;
  speculativeUsed: number;
  speculativeBytes: number;
  /** Wall seconds the computing thread spent waiting for reads. */
  readWaitSeconds: number;
  /** Records loaded at open from a learned hotlist. */
  warmed: number;
}

const SAMPLE = 16;
/**
 * LFU-DA, the score of a record: the aging level when it was last asked for + how often its expert
 * was ever asked for (counts survive eviction, so an expert that keeps coming back is recognised on
 * its second visit); each eviction raises the aging level to the victim's priority so that old fame
 * fades. Layers are visited in a fixed cycle, so a record can only be wanted again when its layer
 * comes round: one due sooner gets up to PHASE_BONUS more, about how much it outweighs one request
 * more (results flat from 2 to 16 on the real Kimi-Linear trace, docs/PERFORMANCE.md).
 */
const PHASE_BONUS = 8;
const key = (layer: number, expert: number) => layer * 65536 + expert;

export class ExpertCache {
  readonly slots: CacheSlot[] = [];
  /** XOR of the bytes touchPages read (kept so the loads are not optimised away). */
  private touched = 0;
  readonly stats: CacheStats;
  private readonly map = new Map<number, CacheSlot>();
  private readonly free: CacheSlot[] = [];
  private clock = 0;
  private rng = 0x2545f491;
  private lastDone = 0;
  /** LFU-DA: demand requests per expert since open (kept when its record is evicted), the aging level, each layer's last step. */
  private readonly requests = new Map<number, number>();
  private aging = 0;
  private readonly layerStep = new Map<number, number>();
  /** Each hotlist this cache wrote: what its saves merge with, and the file as the last one left it. */
  private readonly usageBefore = new Map<string, { before: HotEntry[]; wrote: string }>();
  /** Records read by this cache, in order (for the I/O floor measurement). */
  readonly readLog: number[] = [];

  constructor(
    private readonly container: Container,
    private readonly files: StreamFiles,
    slots: { arena: Arena; off: number }[],
    readonly stride: number,
    readonly policy: CachePolicy,
    private readonly readers: ReaderPool | undefined,
    private readonly verify: boolean,
  ) {
    this.stats = { slots: 0, hits: 0, misses: 0, bytesRead: 0, speculativeReads: 0, speculativeUsed: 0, speculativeBytes: 0, readWaitSeconds: 0, warmed: 0 };
    this.addSlots(slots.map((s, i) => ({ ...s, index: i })));
  }

  /**
   * Add empty slots (an arena given back to the cache). `index` names a slot's status word in the
   * reader pool: every slot the cache can ever hold has its own, fixed at open.
   */
  addSlots(slots: { arena: Arena; off: number; index: number }[]): void {
    const added: CacheSlot[] = slots.map((s) => ({ index: s.index, arena: s.arena, off: s.off, view: s.arena.u8(s.off, this.stride), key: -1, hits: 0, last: 0, born: 0, pins: 0, speculative: false, checked: false, prio: 0 }));
    this.slots.push(...added);
    // the lowest index is taken first
    this.free.unshift(...added.reverse());
    this.stats.slots = this.slots.length;
  }

  /**
   * Take every slot of `arena` out of the cache (its records are forgotten; a later request reads
   * them again). Refused while one of them is pinned by a computation or a read is landing in it:
   * the caller drains and calls this between forward passes. Returns how many slots went.
   */
  removeArena(arena: Arena): number {
    const gone = this.slots.filter((s) => s.arena === arena);
    for (const s of gone)
      if (s.pins > 0 || this.inflight(s)) throw new WasteError('E_STATE', `slot ${s.index} of arena ${arena.id} is in use; the cache cannot give its arena back now`);
    for (const s of gone) {
      if (s.key >= 0) this.map.delete(s.key);
      s.key = -1;
      if (this.readers) Atomics.store(this.readers.status, s.index, Status.EMPTY);
    }
    const keep = (s: CacheSlot) => s.arena !== arena;
    this.slots.splice(0, this.slots.length, ...this.slots.filter(keep));
    this.free.splice(0, this.free.length, ...this.free.filter(keep));
    this.stats.slots = this.slots.length;
    return gone.length;
  }

  /** Slots in `arena` that are pinned or being read into. */
  busyIn(arena: Arena): number {
    let n = 0;
    for (const s of this.slots) if (s.arena === arena && (s.pins > 0 || this.inflight(s))) n++;
    return n;
  }

  get direct(): boolean {
    return this.files.direct;
  }

  /** Slots not pinned: how many records a batch of requests may claim at once. */
  available(): number {
    let n = 0;
    for (const s of this.slots) if (s.pins === 0 && !this.inflight(s)) n++;
    return n;
  }

  private inflight(s: CacheSlot): boolean {
    return this.readers !== undefined && Atomics.load(this.readers.status, s.index) === Status.QUEUED;
  }

  private nextRandom(): number {
    this.rng = (Math.imul(this.rng, 1664525) + 1013904223) >>> 0;
    return this.rng;
  }

  /** A slot to read into: an empty one, else the LFRU (or LRU) choice among a sample. */
  private victim(): CacheSlot {
    const f = this.free.pop();
    if (f) return f;
    let best: CacheSlot | undefined;
    const n = this.slots.length;
    if (this.policy === 'lfuda') {
      const cycle = Math.max(1, this.container.banks.size);
      let bestScore = Infinity;
      let bestDue = 0;
      for (const s of this.slots) {
        if (s.pins > 0 || this.inflight(s)) continue;
        const due = this.stepsUntilDue(s, cycle);
        const score = s.prio + PHASE_BONUS * (1 - due / cycle);
        if (score < bestScore || (score === bestScore && due > bestDue)) {
          best = s;
          bestScore = score;
          bestDue = due;
        }
      }
      if (best) {
        this.aging = best.prio;
        return this.evict(best);
      }
    }
    for (let i = 0; i < SAMPLE; i++) {
      const s = this.slots[this.nextRandom() % n];
      if (s.pins > 0 || this.inflight(s)) continue;
      if (!best || this.better(s, best)) best = s;
    }
    if (!best) for (const s of this.slots) if (s.pins === 0 && !this.inflight(s)) return this.evict(s);
    if (!best) {
      // every unpinned slot is still being read into: wait for one to land, then choose again
      const reading = this.slots.filter((s) => s.pins === 0 && this.inflight(s));
      if (!reading.length) throw new WasteError('E_STATE', `the expert cache is too small: all ${n} slots are in use`);
      this.waitAny(reading);
      return this.victim();
    }
    return this.evict(best);
  }

  /** Layer steps until the slot's layer is asked for again (1 … cycle), assuming the usual cycle. */
  private stepsUntilDue(s: CacheSlot, cycle: number): number {
    const last = this.layerStep.get(Math.floor(s.key / 65536));
    if (last === undefined) return cycle;
    const ahead = last + cycle - this.clock;
    return ahead >= 1 && ahead <= cycle ? ahead : (((ahead - 1) % cycle) + cycle) % cycle + 1;
  }

  /** Is `a` a better victim than `b`? */
  private better(a: CacheSlot, b: CacheSlot): boolean {
    if (this.policy === 'lfru') {
      // hits per clock tick since loading; the offset (two tokens of MoE layers) keeps a record
      // loaded a moment ago from looking either idle or busy on one data point
      const age = 2 * this.container.banks.size;
      const ra = a.hits / (this.clock - a.born + age);
      const rb = b.hits / (this.clock - b.born + age);
      if (ra !== rb) return ra < rb;
    }
    return a.last < b.last;
  }

  private evict(s: CacheSlot): CacheSlot {
    this.map.delete(s.key);
    s.key = -1;
    return s;
  }

  private issue(s: CacheSlot, layer: number, expert: number, speculative = false): void {
    s.key = key(layer, expert);
    s.hits = 1;
    s.last = this.clock;
    s.born = this.clock;
    s.checked = false;
    s.prio = this.aging + (this.requests.get(s.key) ?? 0);
    this.map.set(s.key, s);
    const bank = this.container.banks.get(layer)!;
    const fd = this.files.fds.get(layer)!;
    this.readLog.push(s.key);
    if (this.readers) this.readers.enqueue(s.index, fd, expert * bank.stride, s.arena.id, s.off, bank.stride, speculative);
    else {
      // no reader threads: read now, on this thread
      let done = 0;
      while (done < bank.stride) {
        const got = fs.readSync(fd, s.view, done, bank.stride - done, expert * bank.stride + done);
        if (got <= 0) break;
        done += got;
      }
      if (done !== bank.stride) {
        this.evict(s);
        this.free.push(s);
        throw bank.fault(expert, `short read (${done} of ${bank.stride} bytes)`);
      }
    }
  }

  /**
   * Demand for layer `layer`'s experts `ids`, in the order they will be used: cached ones are hits,
   * the rest are read (all requested at once, in this order). Every returned slot is pinned until
   * released.
   */
  request(layer: number, ids: readonly number[]): CacheSlot[] {
    const bank = this.container.banks.get(layer);
    if (!bank) throw new WasteError('E_STATE', `layer ${layer} has no expert bank`);
    for (const e of ids) if (!(e >= 0 && e < bank.experts)) throw new WasteError('E_STATE', `layer ${layer} has no expert ${e}`);
    this.clock++;
    this.layerStep.set(layer, this.clock);
    // pin every hit before the first miss chooses a victim, so no miss can evict an expert this
    // same step is about to use
    const out: (CacheSlot | undefined)[] = ids.map((e) => {
      const k = key(layer, e);
      this.requests.set(k, (this.requests.get(k) ?? 0) + 1);
      const s = this.map.get(k);
      if (!s) return undefined;
      this.stats.hits++;
      if (s.speculative) {
        this.stats.speculativeUsed++;
        s.speculative = false;
      }
      s.hits++;
      s.last = this.clock;
      s.prio = this.aging + this.requests.get(k)!;
      s.pins++;
      return s;
    });
    ids.forEach((e, i) => {
      if (out[i]) return;
      // the same expert asked twice in one step: the first ask's slot serves both
      const again = this.map.get(key(layer, e));
      if (again) {
        this.stats.hits++;
        again.pins++;
        out[i] = again;
        return;
      }
      this.stats.misses++;
      this.stats.bytesRead += bank.stride;
      const s = this.victim();
      this.issue(s, layer, e);
      s.pins++;
      out[i] = s;
    });
    return out as CacheSlot[];
  }

  /** Lookahead: read these experts of `layer` if they are not cached (never evicting pinned slots). */
  prefetch(layer: number, ids: readonly number[]): void {
    const bank = this.container.banks.get(layer);
    if (!bank) return;
    // A guess never displaces another whose layer has not come yet (its read would be for nothing;
    // with guesses several layers ahead it was what the farther ones evicted, never-used records
    // scoring lowest): those are held for the while. Demand misses still evict them.
    const held = this.slots.filter((s) => s.speculative && s.key >= 0 && s.born >= (this.layerStep.get(Math.floor(s.key / 65536)) ?? 0));
    for (const s of held) s.pins++;
    try {
      for (const e of ids) {
        if (this.map.has(key(layer, e))) continue;
        if (this.available() <= 0) return;
        const s = this.victim();
        this.issue(s, layer, e, true);
        s.speculative = true;
        s.hits = 0;
        s.pins++;
        held.push(s);
        this.stats.speculativeReads++;
        this.stats.speculativeBytes += bank.stride;
      }
    } finally {
      for (const s of held) this.release(s);
    }
  }

  /** True once the slot's record is in memory (or its read failed). */
  landed(s: CacheSlot): boolean {
    return !this.inflight(s);
  }

  /** Wait until one of `pending` has landed; returns its index in `pending`. */
  waitAny(pending: readonly CacheSlot[]): number {
    const t0 = performance.now();
    try {
      for (;;) {
        for (let i = 0; i < pending.length; i++) if (this.landed(pending[i])) return i;
        const ctrl = this.readers!.ctrl;
        const done = Atomics.load(ctrl, 2);
        if (done === this.lastDone) Atomics.wait(ctrl, 2, done, 1000);
        this.lastDone = Atomics.load(ctrl, 2);
      }
    } finally {
      this.stats.readWaitSeconds += (performance.now() - t0) / 1000;
    }
  }

  /** The slot's record, checked the first time it is used after landing. */
  record(s: CacheSlot): Uint8Array {
    if (!this.landed(s)) this.waitAny([s]);
    const layer = Math.floor(s.key / 65536);
    const expert = s.key % 65536;
    const bank = this.container.banks.get(layer)!;
    if (!s.checked) {
      const st = this.readers ? Atomics.load(this.readers.status, s.index) : Status.READY;
      if (st !== Status.READY) {
        const why =
          st === Status.ERR_CRC
            ? 'checksum mismatch (the record is damaged)'
            : st === Status.ERR_SHORT
              ? 'short read (the bank is truncated)'
              : `read failed (errno ${-this.readers!.errno[s.index]})`;
        this.forget(s);
        throw bank.fault(expert, why);
      }
      try {
        bank.check(expert, s.view, this.verify && !this.readers);
      } catch (e) {
        this.forget(s);
        throw e;
      }
      s.checked = true;
    }
    return s.view;
  }

  /** Drop a slot whose contents are bad, so a later request reads it again. */
  private forget(s: CacheSlot): void {
    this.evict(s);
    s.pins = 0;
    s.speculative = false;
    if (this.readers) Atomics.store(this.readers.status, s.index, Status.EMPTY);
    this.free.push(s);
  }

  release(s: CacheSlot): void {
    if (s.pins > 0) s.pins--;
  }

  /** Wait for every read in flight (before closing, or before measuring). */
  drain(): void {
    const pending = this.slots.filter((s) => !this.landed(s));
    while (pending.length) pending.splice(this.waitAny(pending), 1);
  }

  /** Read every expert of every layer (the cache must have a slot for each). */
  preloadAll(): void {
    for (const [layer, bank] of this.container.banks)
      for (let e = 0; e < bank.experts; e++) {
        const s = this.victim();
        this.issue(s, layer, e);
        s.hits = 0;
      }
    if (this.readers) this.drain();
    // Pay the first-access cost of every page now (see touchPages), so a preloaded model runs at
    // its steady speed from the first token.
    for (const s of this.slots) if (s.key >= 0) this.touched ^= touchPages(this.record(s));
    this.readLog.length = 0;
  }

  // --- learned hotlist: usage.waste, the C engine's format (src/experts/hotlist.ts) ------------

  /**
   * Write the experts held now with their hit counts, merged with those `file` listed before this
   * cache first wrote it, or lists now if another process wrote it since (see mergeHotlist),
   * atomically. Returns how many it lists.
   */
  saveUsage(file: string): number {
    const held: HotEntry[] = this.slots.filter((s) => s.key >= 0 && s.hits > 0 && this.landed(s)).map((s) => ({ layer: Math.floor(s.key / 65536), expert: s.key % 65536, hits: s.hits, last: s.last }));
    // merged with the file as it was before this cache first wrote it, while the file is still the
    // one it wrote: saving again while open (learnEvery) replaces this run's entries instead of
    // halving the earlier ones once more. A file another process wrote since, or that was removed,
    // is taken as it is now.
    const mine = this.usageBefore.get(file);
    const before = mine && mine.wrote === fileStamp(file) ? mine.before : this.readUsage(file);
    const entries = mergeHotlist(held, before);
    writeHotlist(file, this.clock, entries);
    this.usageBefore.set(file, { before, wrote: fileStamp(file) });
    return entries.length;
  }

  private readUsage(file: string): HotEntry[] {
    let experts = 0;
    for (const b of this.container.banks.values()) experts += b.experts;
    return readHotlist(file, (layer) => this.container.banks.get(layer)?.experts, experts);
  }

  /**
   * Read a hotlist (untrusted: bad entries are skipped, a bad file is ignored) and load its experts,
   * most used first, until the cache is full. Returns how many were loaded.
   */
  warm(file: string): number {
    const entries = this.readUsage(file);
    let n = 0;
    for (const e of entries) {
      if (n >= this.slots.length) break;
      if (this.map.has(key(e.layer, e.expert))) continue;
      const s = this.victim();
      this.issue(s, e.layer, e.expert);
      s.hits = Math.min(e.hits, 1 << 30);
      n++;
    }
    if (this.readers) this.drain();
    for (const s of this.slots) {
      if (s.key < 0) continue;
      try {
        this.record(s);
      } catch {
        /* a bad record is simply not warm */
      }
    }
    this.readLog.length = 0;
    this.stats.warmed = n;
    return n;
  }
}

/** Which write a file is (a rename gives each a new inode), or '' when there is none. */
function fileStamp(file: string): string {
  try {
    const st = fs.statSync(file);
    return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}`;
  } catch {
    return '';
  }
}
