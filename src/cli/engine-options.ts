import { type Command, Option } from 'commander';
import type { OpenOptions } from '../engine.js';
import { DEFAULT_CHUNK } from '../runtime/plan.js';
import { usableRam } from '../runtime/ram.js';
import { parseSize } from '../util/size.js';
import { intArg } from './args.js';

/** The options every command that opens a model shares. */
export interface EngineFlags {
  budget?: string;
  threads?: number;
  ioThreads: number;
  lookahead: number;
  cachePolicy: 'lfru' | 'lru' | 'lfuda';
  verify: boolean;
  direct: boolean;
  warm: boolean;
  ctx: number;
  chunk: number;
  kernelImpl: 'wasm' | 'typescript';
}

export function addEngineOptions(cmd: Command): Command {
  return cmd
    .option('--budget <size>', 'RAM ceiling for everything the engine allocates: bytes, 512M, 8G, or a percentage of usable RAM (default: the plan\'s default budget)')
    .option('--ctx <n>', 'context length', intArg(1, 1 << 24), 4096)
    .option('--chunk <n>', 'prefill: tokens run together, each expert read once per chunk (larger reads less, needs more scratch)', intArg(1, 4096), DEFAULT_CHUNK)
    .option('--threads <n>', 'compute threads (default: one per core)', intArg(1, 256))
    .option('--io-threads <n>', 'reader threads for expert records (0 reads on the compute thread)', intArg(0, 64), 2)
    .option('--lookahead <k>', 'decode: prefetch the next layer\'s k likeliest experts (0 disables)', intArg(0, 64), 6)
    .addOption(new Option('--cache-policy <policy>', 'expert-cache eviction: lfru (hits per time held, sampled), lru, or lfuda (request counts kept across evictions, aged, every slot compared)').choices(['lfru', 'lru', 'lfuda']).default('lfru'))
    .option('--verify', "check each expert record's CRC32 as it enters RAM, and trunk.bin and codebooks.bin against their SHA-256 at open", false)
    .option('--no-direct', 'read experts through the page cache instead of O_DIRECT')
    .option('--no-warm', "ignore the container's usage.waste hotlist")
    .addOption(new Option('--kernel-impl <impl>', 'kernel implementation (typescript: the plain reference, single-threaded)').choices(['wasm', 'typescript']).default('wasm'));
}

export function openOptions(f: EngineFlags): OpenOptions {
  return {
    budget: f.budget !== undefined ? parseSize(f.budget, usableRam().usable, 'budget') : undefined,
    threads: f.threads,
    ioThreads: f.ioThreads,
    lookahead: f.lookahead,
    cachePolicy: f.cachePolicy,
    verify: f.verify,
    direct: f.direct,
    warm: f.warm,
    maxContext: f.ctx,
    chunk: f.chunk,
    kernels: f.kernelImpl,
  };
}
