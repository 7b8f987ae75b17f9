import type { Container } from '../container/open.js';
import type { ExpertQuant } from '../container/format.js';
import type { ModelConfig } from '../core/model-config.js';
import { ARENA_RESERVED, MAX_ARENA_BYTES, WASM_PAGE } from '../memory/arena.js';
import { aligned } from '../memory/align.js';
import type { Architecture } from '../model/architecture.js';
import { architecture } from '../model/registry.js';
import { ContainerSource } from '../model/sources/container-source.js';
import { expertWorkArenaBytes, kernelArenaBytes } from '../kernels/wasm/index.js';
import { WasteError } from '../util/errors.js';
import { formatSize } from '../util/size.js';
import { type UsableRam, usableRam } from './ram.js';

/**
 * Prefill tokens run together by default: each expert the chunk routes to is read once for all of
 * them (64, as the C engine does; 16 read 2.1x the bytes for a 128-token prompt, docs/PERFORMANCE.md).
 */
export const DEFAULT_CHUNK = 64;

/**
 * The memory plan: what a model needs resident (trunk, per-session state, scratch), the smallest
 * expert cache (two layers' selected experts), and so the floor below which the engine refuses to
 * open; one token's expert working set (every MoE layer's selected experts); the default budget
 * (floor plus 3, 2 or 1 working sets, the most that fits under 7/8 of usable RAM); and, for a given
 * budget, exactly how the arenas are laid out and how many expert-cache slots they hold.
 */
export interface PlanOptions {
  maxContext?: number;
  chunk?: number;
  threads?: number;
  sessions?: number;
  /** Cap on one arena (tests); default 4 GiB. */
  arenaBytes?: number;
  ram?: UsableRam;
  /** Bytes the vision tower's arena takes when the first image loads it (reserved in every layout; 0: none). */
  visionBytes?: number;
  /** Cap on one arena of the elastic cache's slots (tests); default ELASTIC_ARENA_BYTES or 8 expert scratches. */
  cacheArenaBytes?: number;
}

/**
 * The elastic cache (the default budget's) keeps its slots in arenas of about this size, so that
 * under memory pressure it can give whole arenas back (a WebAssembly memory cannot shrink, but a
 * dropped one is unmapped). Smaller arenas give finer steps but each carries its own expert
 * scratch (109 MiB on Kimi-Linear at chunks of 64) and splits a layer's lookup tables over more
 * arenas, so an arena is at least 8 such scratches.
 */
export const ELASTIC_ARENA_BYTES = 1 << 30;

/**
 * What the default budget leaves to the operating system and the rest of the process (V8's heap,
 * Node, the image cache, other programs' growth): an eighth of usable RAM — the share the old
 * capacity-only default kept — and never less than 1 GiB.
 */
export function osMargin(usable: number): number {
  return Math.max(2 ** 30, Math.floor(usable / 8));
}

/**
 * What the process holds outside its budget (Node and V8's heap, the worker threads, compiled
 * kernels, logits arrays): the default leaves this too, so that a full cache still leaves the margin
 * available and the elastic cache does not take its own growth for the machine's pressure.
 */
export const PROCESS_ALLOWANCE_BYTES = 512 * 2 ** 20;

export interface ArenaPlan {
  /**
   * Trunk groups (layer indices; the head is index `layers`) held by this arena. An arena holds
   * trunk groups or expert-cache slots, never both: each kind needs its own working memory (a
   * layer's activations; an expert's lookup tables for a whole chunk), and K3's trunk spans eight
   * or more arenas that would otherwise each carry the tables.
   */
  groups: number[];
  /** Expert-cache slots in this arena. */
  slots: number;
  /** Bytes this arena is created with (a multiple of 64 KiB, including the module's reserve). */
  bytes: number;
}

export interface Layout {
  arenas: ArenaPlan[];
  slots: number;
  /** Every arena's bytes, the vision tower's reserved room included. */
  bytes: number;
}

export interface MemoryPlan {
  maxContext: number;
  sessions: number;
  trunkBytes: number;
  stateBytes: number;
  /** The vision tower's arena, reserved in the floor and every budget (0 without one). */
  visionBytes: number;
  /** Working memory of an arena holding trunk layers, and of one holding expert slots. */
  scratchBytesPerArena: number;
  expertScratchBytesPerArena: number;
  recordBytes: number;
  /** Expert records one token reads: MoE layers × top-k. */
  workingSetRecords: number;
  workingSetBytes: number;
  /** The smallest cache: two layers' selected experts (one layer computing while the next one's reads land). */
  floorRecords: number;
  totalExperts: number;
  floorBytes: number;
  ram: UsableRam;
  /**
   * The default budget: the floor and every expert record (in the elastic cache's arenas), or less
   * when available RAM minus the OS margin and the process's own allowance is less, never below the floor.
   */
  defaultBudget: number;
  /** What bounded the default: every expert fits, available RAM (MemAvailable or the cgroup's headroom) less the margin, or only the floor fits. */
  defaultFrom: 'expert bytes' | 'MemAvailable' | 'cgroup' | 'usable RAM' | 'floor';
  /** Bytes the default leaves free (osMargin of usable RAM). */
  osMarginBytes: number;
  /** Cap on one arena of the elastic cache. */
  elasticArenaBytes: number;
  /** The arena layout (and cache size) for a budget. */
  layout(budget: number): Layout;
  /** The same in the elastic cache's arenas (slots split evenly over arenas of at most elasticArenaBytes). */
  elasticLayout(budget: number): Layout;
  /** The layout for exactly `slots` cache slots (at least the floor's). */
  layoutForSlots(slots: number): Layout;
}

/** Slack per arena for the alignment of its allocations. */
const ARENA_SLACK = 64 * 1024;

/** The plan for a container: its architecture sizes everything from the manifest alone, no weight read. */
export function planMemory(c: Container, opts: PlanOptions = {}): MemoryPlan {
  let stride = 0;
  for (const b of c.banks.values()) stride = Math.max(stride, b.stride);
  const arch = architecture(c.config.arch);
  return planFor(arch, c.config, arch.planWeights(new ContainerSource(c), c.config, c.quant), stride, c.quant, opts);
}

/** The bytes of an arena of its own that holds `used` bytes: whole pages, its reserved head included. */
export function arenaBytesFor(used: number): number {
  return Math.ceil((ARENA_RESERVED + used) / WASM_PAGE) * WASM_PAGE;
}

/**
 * The plan for a model whose trunk groups take `groups` bytes and whose expert records take
 * `stride` bytes each (0: no streamed experts, e.g. a checkpoint with its experts in the trunk).
 */
export function planFor(arch: Architecture, cfg: ModelConfig, groups: number[], stride: number, q: ExpertQuant | undefined, opts: PlanOptions = {}): MemoryPlan {
  const maxContext = opts.maxContext ?? 4096;
  const chunk = opts.chunk ?? DEFAULT_CHUNK;
  const threads = opts.threads ?? 1;
  const sessions = opts.sessions ?? 1;
  const cap = Math.min(opts.arenaBytes ?? MAX_ARENA_BYTES, MAX_ARENA_BYTES);
  const statePerLayer = arch.stateBytes(cfg, maxContext);
  const weighted = groups.map((g, i) => g + (i < cfg.layers ? sessions * statePerLayer[i] : 0));
  const scratch = aligned(arch.scratchBytes(cfg, chunk, maxContext, q, 'layers')) + kernelArenaBytes(arch.widestInput(cfg), chunk, threads) + ARENA_SLACK;
  // an expert arena also holds the experts kernel's working rows for a decode step, allocated at its first use
  const expertScratch =
    aligned(arch.scratchBytes(cfg, chunk, maxContext, q, 'experts')) +
    kernelArenaBytes(0, 0, threads) +
    expertWorkArenaBytes(cfg.moe.inter, cfg.expertWidth, q, threads, cfg.moe.topK) +
    ARENA_SLACK;
  const moeLayers = stride ? cfg.layerKinds.filter((k) => k.ffn === 'moe').length : 0;
  const wsRecords = moeLayers * cfg.moe.topK;
  const totalExperts = moeLayers * cfg.moe.experts;
  // what the C engine opens K3 with: a token's 17 GiB of experts would shut out 32–46 GB machines,
  // and below a token's working set nothing survives between tokens anyway (reads decide speed)
  const floorRecords = Math.min(totalExperts, 2 * (moeLayers ? cfg.moe.topK : 0));

  // Trunk groups in order, each arena with its scratch.
  const base: { groups: number[]; used: number }[] = [];
  const limit = cap - ARENA_RESERVED;
  weighted.forEach((bytes, g) => {
    if (bytes + scratch > limit)
      throw new WasteError(
        'E_UNSUPPORTED',
        `unsupported: ${g < cfg.layers ? `layer ${g}` : 'the head'} needs ${formatSize(bytes)} resident and ${formatSize(scratch)} of working memory (chunks of ${chunk}), more than one memory arena holds (${formatSize(limit)}); a smaller --chunk takes less`,
      );
    let cur = base[base.length - 1];
    if (!cur || cur.used + bytes > limit) base.push((cur = { groups: [], used: scratch }));
    cur.groups.push(g);
    cur.used += bytes;
  });
  const visionBytes = opts.visionBytes ? arenaBytesFor(opts.visionBytes) : 0;
  if (visionBytes > cap) throw new WasteError('E_UNSUPPORTED', `unsupported: the vision tower needs ${formatSize(visionBytes)}, more than one memory arena holds (${formatSize(cap)})`);

  const elasticArenaBytes = Math.min(cap, Math.max(opts.cacheArenaBytes ?? ELASTIC_ARENA_BYTES, opts.cacheArenaBytes ? 0 : 8 * expertScratch));
  const layoutIn = (slots: number, slotLimit: number, even: boolean): Layout => {
    const arenas: ArenaPlan[] = base.map((a) => ({ groups: a.groups, slots: 0, bytes: 0 }));
    const used = base.map((a) => a.used);
    let left = slots;
    const start = Math.ceil(expertScratch / 4096) * 4096;
    const most = Math.floor((slotLimit - start) / stride);
    // the elastic cache's arenas hold equal shares, so that each one dropped gives back as much
    const each = even && most >= 1 ? Math.ceil(slots / Math.ceil(slots / most)) : most;
    // the trunk's arenas, then arenas of slots, each with its own scratch
    while (left > 0) {
      const n = Math.min(left, each);
      if (n < 1)
        throw new WasteError(
          'E_UNSUPPORTED',
          `unsupported: an expert record of ${formatSize(stride)} and an expert arena's ${formatSize(expertScratch)} of working memory (lookup tables for chunks of ${chunk}) do not fit in one memory arena (${formatSize(slotLimit)}); a smaller --chunk takes less`,
        );
      arenas.push({ groups: [], slots: n, bytes: 0 });
      used.push(start + n * stride);
      left -= n;
    }
    arenas.forEach((a, i) => (a.bytes = arenaBytesFor(used[i])));
    return { arenas, slots, bytes: arenas.reduce((s, a) => s + a.bytes, 0) + visionBytes };
  };
  const layout = (slots: number) => layoutIn(slots, limit, false);
  const elastic = (slots: number) => layoutIn(slots, elasticArenaBytes - ARENA_RESERVED, true);

  const floorBytes = layout(floorRecords).bytes;
  const ram = opts.ram ?? usableRam();
  const osMarginBytes = osMargin(ram.usable);
  // every expert, in the elastic cache's arenas
  const all = elastic(Math.max(floorRecords, totalExperts)).bytes;
  const room = Math.min(ram.usable, ram.available ?? ram.usable) - osMarginBytes - PROCESS_ALLOWANCE_BYTES;
  const defaultBudget = Math.max(floorBytes, Math.min(all, room));
  const defaultFrom = all <= room ? 'expert bytes' : room <= floorBytes ? 'floor' : (ram.availableFrom ?? 'usable RAM');
  return {
    maxContext,
    sessions,
    trunkBytes: groups.reduce((s, g) => s + g, 0),
    stateBytes: statePerLayer.reduce((s, b) => s + b, 0) * sessions,
    visionBytes,
    scratchBytesPerArena: scratch,
    expertScratchBytesPerArena: expertScratch,
    recordBytes: stride,
    workingSetRecords: wsRecords,
    workingSetBytes: wsRecords * stride,
    floorRecords,
    totalExperts,
    floorBytes,
    ram,
    defaultBudget,
    defaultFrom,
    osMarginBytes,
    elasticArenaBytes,
    layoutForSlots(slots: number): Layout {
      if (slots < floorRecords)
        throw new WasteError('E_ARG', `an expert cache of ${slots} slots is below the floor's ${floorRecords} (two layers' selected experts)`);
      return layout(slots);
    },
    layout(budget: number): Layout {
      return fit(budget, layout);
    },
    elasticLayout(budget: number): Layout {
      return fit(budget, elastic);
    },
  };

  /** The most slots `budget` pays for in `lay`'s arenas, never more than every expert. */
  function fit(budget: number, lay: (slots: number) => Layout): Layout {
    if (budget < floorBytes)
      throw new WasteError(
        'E_ARG',
        `a RAM budget of ${formatSize(budget)} is below this model's floor of ${formatSize(floorBytes)} (${floorBytes} bytes: trunk, state for ${maxContext} tokens, scratch${visionBytes ? ', the vision tower' : ''} and two layers' selected experts); run \`waste plan\` to see it`,
      );
    let lo = floorRecords;
    let hi = Math.max(floorRecords, totalExperts);
    if (lay(hi).bytes <= budget) return lay(hi);
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (lay(mid).bytes <= budget) lo = mid;
      else hi = mid - 1;
    }
    return lay(lo);
  }
}
