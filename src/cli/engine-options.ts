import { type Command, Option } from 'commander';
import { CACHE_POLICIES, DEFAULT_ACTIVATIONS, DEFAULT_LEARN_EVERY, DEFAULT_LOOKAHEAD_LAYERS, OPTION_BOUNDS, type OpenOptions } from '../engine/options.js';
import { ACTIVATIONS, type Activations } from '../kernels/types.js';
import { DEFAULT_CHUNK } from '../engine/plan.js';
import { usableRam } from '../engine/ram.js';
import { parseSize } from '../util/size.js';
import { intArg } from './args.js';
import { Progress } from './progress.js';
import * as path from 'node:path';
import { DEMO_MODEL, resolveModel } from '../store/names.js';

/** The options every command that opens a model shares. */
export interface EngineFlags {
  budget?: string;
  threads?: number;
  ioThreads: number;
  lookahead: number;
  lookaheadLayers: number;
  cachePolicy: 'lfru' | 'lru' | 'lfuda';
  verify: boolean;
  direct: boolean;
  warm: boolean;
  /** Commands that decode (run, chat, serve) and logits: save the learned hot set at close. */
  learn?: boolean;
  /** Seconds between saves of the learned hot set while open (commands with --learn). */
  learnEvery?: number;
  vision: boolean;
  imagePatches?: number;
  ctx: number;
  chunk: number;
  kernelImpl: 'wasm' | 'typescript';
  activations: Activations;
}

export function addEngineOptions(cmd: Command): Command {
  return cmd
    .option('--budget <size>', 'RAM ceiling for everything the engine allocates: bytes, 512M, 8G, or a percentage of usable RAM (fixed); auto (the default): the floor and every expert, or available RAM less a margin, in a cache that gives memory back under pressure')
    .option('--ctx <n>', 'context length', intArg(...OPTION_BOUNDS.maxContext), 4096)
    .option('--chunk <n>', 'prefill: tokens run together, each expert read once per chunk (larger reads less, needs more scratch)', intArg(...OPTION_BOUNDS.chunk), DEFAULT_CHUNK)
    .option('--threads <n>', 'compute threads (default: one per core)', intArg(...OPTION_BOUNDS.threads))
    .option('--io-threads <n>', 'reader threads for expert records (0 reads on the compute thread)', intArg(...OPTION_BOUNDS.ioThreads), 2)
    .option('--lookahead <k>', 'decode: prefetch the k likeliest experts of each coming MoE layer (0 disables)', intArg(...OPTION_BOUNDS.lookahead), 6)
    .option('--lookahead-layers <n>', 'decode: how many MoE layers ahead to prefetch (0 disables)', intArg(...OPTION_BOUNDS.lookaheadLayers), DEFAULT_LOOKAHEAD_LAYERS)
    .addOption(new Option('--cache-policy <policy>', 'expert-cache eviction: lfru (hits per time held, sampled), lru, or lfuda (request counts kept across evictions, aged, every slot compared)').choices(CACHE_POLICIES).default('lfru'))
    .option('--verify', "check each expert record's CRC32 as it enters RAM, and trunk.bin and codebooks.bin against their SHA-256 at open", false)
    .option('--no-direct', 'read experts through the page cache instead of O_DIRECT')
    .option('--no-warm', "ignore the container's usage.waste hotlist")
    .option('--no-vision', "leave the vision tower's room in the budget to the expert cache (images are then refused)")
    .option('--image-patches <n>', "the most patches of 14 pixels an image may become (default: the model's max_patches, 1024 for K3); --image-route native needs more to keep an image's resolution (4096 for 896 x 896), at a cost growing with its square", intArg(...OPTION_BOUNDS.imagePatches))
    .addOption(new Option('--kernel-impl <impl>', 'kernel implementation (typescript: the plain reference, single-threaded)').choices(['wasm', 'typescript']).default('wasm'))
    .addOption(new Option('--activations <mode>', 'Q8G/Q4G products: a16 (16 bits per group of activations, one multiply per weight: faster, error up to 2^-16 of each group\'s largest) or exact (f32-accurate activations)').choices(ACTIVATIONS).default(DEFAULT_ACTIVATIONS));
}

/** --no-learn, for the commands that decode: they save the cache's hot set at close by default. */
export function addLearnOption(cmd: Command): Command {
  return cmd
    .option('--learn', "save the experts the cache holds at the end to the model's usage.waste, so the next open starts warm (the default, except for the shipped demo model)")
    .option('--no-learn', "don't save the learned hot set")
    .option('--learn-every <seconds>', 'while learning, also save the hot set this often, so a process that is killed keeps what it learned (0: only at the end)', intArg(...OPTION_BOUNDS.learnEvery), DEFAULT_LEARN_EVERY);
}

/**
 * The engine options of a command's flags. `model` (the MODEL argument of a command that learns by
 * default) turns learning on unless --no-learn, except for the shipped demo model: its directory is
 * the package's own (often read-only, and shared by every user of the install).
 */
export function openOptions(f: EngineFlags, model?: string): OpenOptions {
  return {
    budget: f.budget !== undefined && f.budget !== 'auto' ? parseSize(f.budget, usableRam().usable, 'budget') : undefined,
    threads: f.threads,
    ioThreads: f.ioThreads,
    lookahead: f.lookahead,
    lookaheadLayers: f.lookaheadLayers,
    cachePolicy: f.cachePolicy,
    verify: f.verify,
    direct: f.direct,
    warm: f.warm,
    learn: f.learn ?? (model !== undefined && !isShippedDemo(model)),
    learnEvery: f.learnEvery,
    vision: f.vision,
    imagePatches: f.imagePatches,
    maxContext: f.ctx,
    chunk: f.chunk,
    kernels: f.kernelImpl,
    activations: f.activations,
    warn: (m) => process.stderr.write(`waste: warning: ${m}\n`),
    onProgress: loadingBar(),
  };
}

/** A bar while the trunk loads, on a terminal, once loading has taken a second (a large model takes many). */
function loadingBar(): (done: number, total: number) => void {
  const start = performance.now();
  let bar: Progress | undefined;
  return (done, total) => {
    if (!process.stderr.isTTY || (!bar && performance.now() - start < 1000)) return;
    bar ??= new Progress('loading', total);
    bar.update(done);
    if (done === total) bar.done();
  };
}

function isShippedDemo(model: string): boolean {
  try {
    return path.resolve(resolveModel(model)) === path.resolve(DEMO_MODEL);
  } catch {
    return false;
  }
}
