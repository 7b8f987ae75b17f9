import type { CachePolicy } from '../experts/cache.js';
import { ACTIVATIONS, type Activations } from '../kernels/types.js';
import { DEFAULT_CHUNK } from './plan.js';
import type { MemorySample } from '../memory/pressure.js';
import type { UsableRam } from './ram.js';
import { WasteError, quoted } from '../util/errors.js';

export interface OpenOptions {
  /** RAM ceiling in bytes for everything the engine allocates (default: the plan's default budget). */
  budget?: number;
  /**
   * Check every expert record's CRC32 as it enters RAM, and trunk.bin and codebooks.bin against
   * the manifest's SHA-256 at open (off by default: a pass per read).
   */
  verify?: boolean;
  /** Compute threads, the calling thread included (default: one per core). */
  threads?: number;
  /** Reader threads for expert records (default 2; 0 reads on the computing thread). */
  ioThreads?: number;
  /** Decode: prefetch this many of each coming MoE layer's likeliest experts (default 6; 0 = off). */
  lookahead?: number;
  /**
   * Decode: how many MoE layers ahead to prefetch (default DEFAULT_LOOKAHEAD_LAYERS; 0 = off).
   * Layer L+d's guess applies its router to layer L's hidden state (docs/PERFORMANCE.md, "Lookahead depth").
   */
  lookaheadLayers?: number;
  /** Expert-cache eviction: 'lfru' (default), 'lru' or 'lfuda'. */
  cachePolicy?: CachePolicy;
  /** Bypass the page cache with O_DIRECT where it works (default true). */
  direct?: boolean;
  /** Load the experts listed in the container's usage.waste at open (default true). */
  warm?: boolean;
  /**
   * At close() (and every `learnEvery` seconds while open), save the experts the cache holds,
   * merged with what the hotlist listed before this run first saved it (or lists now, if another
   * process has written it since), to the container's usage.waste (atomically), so the next open
   * starts warm (default false; the CLI's run, chat and serve turn it on). A directory that cannot
   * be written is reported through `warn`, and close() still succeeds.
   */
  learn?: boolean;
  /**
   * With `learn`, also save every this many seconds while the model is open and has computed
   * since the last save (default 600; 0: only at close), so that a process killed without a chance
   * to close (SIGKILL, the OOM killer, a crash) keeps what it learned up to the last save.
   */
  learnEvery?: number;
  /** Where the hotlist is read (warm) and written (learn, saveUsage): default `<model>/usage.waste`. */
  usageFile?: string;
  /** Read every expert into the cache at open (the budget must hold them all). */
  preloadExperts?: boolean;
  /**
   * Room for the vision tower in the budget (default true when the model has one): it is loaded
   * when the first image arrives. false leaves its bytes to the expert cache, and images are refused.
   */
  vision?: boolean;
  /**
   * The most patches of 14 pixels one image may become (default: the model's max_patches, 1024
   * for K3): the tower's working memory is sized for it. The `native` image route needs more to
   * keep an image's resolution (4096 for 896 × 896), at a cost that grows with its square.
   */
  imagePatches?: number;
  /** Size the cache to exactly this many records, the budget to match (experiments; overrides budget). */
  cacheSlots?: number;
  /** 'wasm' (default): WebAssembly SIMD kernels; 'typescript': the plain reference kernels. */
  kernels?: 'wasm' | 'typescript';
  /**
   * How Q8G/Q4G products take their activations: 'a16' (default; 16 bits per group of
   * activations, one multiply per weight) or 'exact' (f32-accurate, two 16-bit multiplies per weight).
   */
  activations?: Activations;
  /** Tokens per prefill chunk (default 64): each expert a chunk routes to is read once for all of them. */
  chunk?: number;
  /** Longest sequence a session may hold (default 4096). */
  maxContext?: number;
  /** Sessions whose state is reserved in the budget (default 1). */
  sessions?: number;
  /** Cap on one arena's size (default: the 4 GiB a memory can address); for tests. */
  arenaBytes?: number;
  /** @internal Cap on one arena of the elastic cache (default: 1 GiB or 8 expert scratches); for tests. */
  cacheArenaBytes?: number;
  /** @internal The machine's RAM as the plan sees it (default: read from /proc and the cgroup); for tests. */
  ram?: UsableRam;
  /** @internal What the elastic cache reads to see memory pressure, and its clock in ms (default: /proc, performance.now); for tests. */
  memorySample?: () => MemorySample;
  clock?: () => number;
  /** Told how loading the trunk goes (layers loaded of all, the head counted as one), for a progress bar. */
  onProgress?: (done: number, total: number) => void;
  /** Told of anything the engine changed from what was asked (a budget above the machine's RAM); default: process.emitWarning. */
  warn?: (message: string) => void;
}

/** The bounds of every numeric option, shared with the CLI's flags so both refuse the same values. */
export const OPTION_BOUNDS = {
  threads: [1, 256],
  ioThreads: [0, 64],
  lookahead: [0, 64],
  lookaheadLayers: [0, 8],
  chunk: [1, 4096],
  maxContext: [1, 1 << 24],
  sessions: [1, 1024],
  cacheSlots: [0, 1 << 30],
  imagePatches: [4, 16384],
  learnEvery: [0, 7 * 24 * 3600],
} as const satisfies Record<string, readonly [number, number]>;

/** The most patches one image may become: the attention kernel's score row has room for this many. */
export const MAX_IMAGE_PATCHES = OPTION_BOUNDS.imagePatches[1];

export const CACHE_POLICIES: readonly CachePolicy[] = ['lfru', 'lru', 'lfuda'];
/** How many MoE layers ahead decode prefetches when not told (docs/PERFORMANCE.md, "Lookahead depth"). */
export const DEFAULT_LOOKAHEAD_LAYERS = 1;
/** Seconds between saves of the learned hot set while a model that learns is open. */
export const DEFAULT_LEARN_EVERY = 600;
/** Activations when none are asked for (docs/PERFORMANCE.md, "Activation precision"). */
export const DEFAULT_ACTIVATIONS: Activations = 'a16';
const KERNELS = ['wasm', 'typescript'] as const;
const KNOWN = new Set(['budget', 'verify', 'threads', 'ioThreads', 'lookahead', 'lookaheadLayers', 'cachePolicy', 'direct', 'warm', 'learn', 'learnEvery', 'usageFile', 'preloadExperts', 'vision', 'imagePatches', 'cacheSlots', 'kernels', 'activations', 'chunk', 'maxContext', 'sessions', 'arenaBytes', 'cacheArenaBytes', 'ram', 'memorySample', 'clock', 'onProgress', 'warn']);
const FLAGS = ['verify', 'direct', 'warm', 'learn', 'preloadExperts', 'vision'] as const;

/** What `Model.open` runs with: every option checked and defaulted. */
export interface ResolvedOpenOptions {
  budget: number | undefined;
  verify: boolean;
  threads: number;
  ioThreads: number;
  lookahead: number;
  lookaheadLayers: number;
  cachePolicy: CachePolicy;
  direct: boolean;
  warm: boolean;
  learn: boolean;
  learnEvery: number;
  usageFile: string | undefined;
  preloadExperts: boolean;
  vision: boolean;
  imagePatches: number | undefined;
  cacheSlots: number | undefined;
  kernels: 'wasm' | 'typescript';
  activations: Activations;
  chunk: number;
  maxContext: number;
  sessions: number;
  arenaBytes: number | undefined;
  cacheArenaBytes: number | undefined;
  ram: UsableRam | undefined;
  memorySample: (() => MemorySample) | undefined;
  clock: (() => number) | undefined;
  warn: (message: string) => void;
  onProgress: ((done: number, total: number) => void) | undefined;
}

const NAMES: Record<string, string> = {
  threads: 'threads',
  ioThreads: 'I/O threads (ioThreads)',
  lookahead: 'lookahead',
  lookaheadLayers: 'lookahead layers (lookaheadLayers)',
  chunk: 'the prefill chunk (chunk)',
  maxContext: 'the context length (maxContext)',
  sessions: 'sessions',
  cacheSlots: 'cache slots (cacheSlots)',
  imagePatches: 'image patches (imagePatches)',
  learnEvery: 'seconds between saves of the learned hot set (learnEvery)',
};

/**
 * Check every option of `open()` as the CLI checks its flags (a library caller gets the same clear
 * error a typo on the command line gets, never a hang or a fault deep inside the first forward),
 * and fill in the defaults. `defaultThreads` is one per core.
 */
export function resolveOpenOptions(opts: OpenOptions, defaultThreads: number): ResolvedOpenOptions {
  if (opts === null || typeof opts !== 'object') throw new WasteError('E_ARG', `open options must be an object (got ${opts === null ? 'null' : typeof opts})`);
  // a misspelt option would otherwise be ignored without a word
  for (const key of Object.keys(opts)) if (!KNOWN.has(key)) throw new WasteError('E_ARG', `unknown open option ${quoted(key)} (known: ${[...KNOWN].join(', ')})`);
  const int = (key: keyof typeof OPTION_BOUNDS, fallback: number): number => {
    const v = (opts as Record<string, unknown>)[key] ?? fallback;
    const [lo, hi] = OPTION_BOUNDS[key];
    if (!(typeof v === 'number' && Number.isInteger(v) && v >= lo && v <= hi)) throw new WasteError('E_ARG', `${NAMES[key]} must be an integer in ${lo}..${hi} (got ${show(v)})`);
    return v;
  };
  for (const key of FLAGS) {
    const v = opts[key];
    if (v !== undefined && typeof v !== 'boolean') throw new WasteError('E_ARG', `${key} must be true or false (got ${show(v)})`);
  }
  if (opts.cachePolicy !== undefined && !CACHE_POLICIES.includes(opts.cachePolicy))
    throw new WasteError('E_ARG', `cachePolicy must be one of ${CACHE_POLICIES.join(', ')} (got ${show(opts.cachePolicy)})`);
  if (opts.kernels !== undefined && !KERNELS.includes(opts.kernels)) throw new WasteError('E_ARG', `kernels must be one of ${KERNELS.join(', ')} (got ${show(opts.kernels)})`);
  if (opts.activations !== undefined && !ACTIVATIONS.includes(opts.activations))
    throw new WasteError('E_ARG', `activations must be one of ${ACTIVATIONS.join(', ')} (got ${show(opts.activations)})`);
  // any size is taken (one above the machine is lowered to its RAM when the model opens)
  if (opts.budget !== undefined && !(typeof opts.budget === 'number' && Number.isFinite(opts.budget) && opts.budget >= 1))
    throw new WasteError('E_ARG', `budget must be a number of bytes, at least 1 (got ${show(opts.budget)})`);
  if (opts.arenaBytes !== undefined && !(typeof opts.arenaBytes === 'number' && Number.isSafeInteger(opts.arenaBytes) && opts.arenaBytes >= 1 << 16))
    throw new WasteError('E_ARG', `arenaBytes must be a whole number of bytes, at least 65536 (got ${show(opts.arenaBytes)})`);
  if (opts.usageFile !== undefined && !(typeof opts.usageFile === 'string' && opts.usageFile.length > 0 && !opts.usageFile.includes('\0')))
    throw new WasteError('E_ARG', `usageFile must be a file path (got ${show(opts.usageFile)})`);
  if (opts.cacheArenaBytes !== undefined && !(typeof opts.cacheArenaBytes === 'number' && Number.isSafeInteger(opts.cacheArenaBytes) && opts.cacheArenaBytes >= 1 << 16))
    throw new WasteError('E_ARG', `cacheArenaBytes must be a whole number of bytes, at least 65536 (got ${show(opts.cacheArenaBytes)})`);
  for (const key of ['warn', 'onProgress', 'memorySample', 'clock'] as const)
    if (opts[key] !== undefined && typeof opts[key] !== 'function') throw new WasteError('E_ARG', `${key} must be a function (got ${show(opts[key])})`);
  const kernels = opts.kernels ?? 'wasm';
  // the reference kernels run on the calling thread alone
  const threads = kernels === 'typescript' ? (int('threads', 1), 1) : int('threads', defaultThreads);
  return {
    budget: opts.budget === undefined ? undefined : Math.floor(opts.budget),
    verify: opts.verify ?? false,
    threads,
    ioThreads: int('ioThreads', 2),
    lookahead: int('lookahead', 6),
    lookaheadLayers: int('lookaheadLayers', DEFAULT_LOOKAHEAD_LAYERS),
    cachePolicy: opts.cachePolicy ?? 'lfru',
    direct: opts.direct ?? true,
    warm: opts.warm ?? true,
    learn: opts.learn ?? false,
    learnEvery: int('learnEvery', DEFAULT_LEARN_EVERY),
    usageFile: opts.usageFile,
    preloadExperts: opts.preloadExperts ?? false,
    vision: opts.vision ?? true,
    imagePatches: opts.imagePatches === undefined ? undefined : int('imagePatches', 0),
    cacheSlots: opts.cacheSlots === undefined ? undefined : int('cacheSlots', 0),
    kernels,
    activations: opts.activations ?? DEFAULT_ACTIVATIONS,
    chunk: int('chunk', DEFAULT_CHUNK),
    maxContext: int('maxContext', 4096),
    sessions: int('sessions', 1),
    arenaBytes: opts.arenaBytes,
    cacheArenaBytes: opts.cacheArenaBytes,
    ram: opts.ram,
    memorySample: opts.memorySample,
    clock: opts.clock,
    warn: opts.warn ?? ((m) => process.emitWarning(m, 'WasteWarning')),
    onProgress: opts.onProgress,
  };
}

function show(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === 'function') return 'a function';
  if (typeof v === 'object') return v === null ? 'null' : Array.isArray(v) ? 'an array' : 'an object';
  return String(v);
}
