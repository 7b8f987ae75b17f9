import * as path from 'node:path';
import { CODEBOOKS } from '../container/codebooks.js';
import type { Container } from '../container/open.js';
import { TRUNK } from '../container/trunk.js';
import type { ModelConfig } from '../core/model-config.js';
import { type CacheStats, ExpertCache } from '../experts/cache.js';
import { type StreamFiles, openStreamFiles } from '../experts/io.js';
import { ReaderPool } from '../experts/readers.js';
import { StreamedExperts } from '../experts/streamed.js';
import { makeTsKernels } from '../kernels/ts/index.js';
import type { Kernels } from '../kernels/types.js';
import { WasmKernels, kernelArenaBytes } from '../kernels/wasm/index.js';
import { cpuCount } from '../kernels/wasm/pool.js';
import { ARENA_RESERVED, Arena } from '../memory/arena.js';
import { MemoryBudget } from '../memory/budget.js';
import type { Architecture, Network, SequenceState, VisionSpec } from '../model/architecture.js';
import { architecture, isCheckpointDir, openModelCheckpoint, openModelContainer } from '../model/registry.js';
import { ContainerSource } from '../model/sources/container-source.js';
import type { WeightSource } from '../model/sources/source.js';
import { markInUse } from '../store/in-use.js';
import { resolveModel } from '../store/names.js';
import type { ChatFormat } from '../chat/format.js';
import { openModelText } from '../chat/model-text.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';
import { WasteError } from '../util/errors.js';
import { formatSize } from '../util/size.js';
import { type OpenOptions, type ResolvedOpenOptions, resolveOpenOptions } from './options.js';
import { type MemoryPlan, planFor } from './plan.js';
import { ElasticCache } from './elastic-cache.js';

/** The name of the learned hotlist next to a container. */
export const USAGE_FILE = 'usage.waste';

/** Everything an open model is made of. */
export interface ModelParts {
  dir: string;
  kind: 'container' | 'checkpoint';
  container: Container | undefined;
  config: ModelConfig;
  arch: Architecture;
  net: Network;
  kernels: Kernels;
  threads: number;
  plan: MemoryPlan;
  budget: MemoryBudget;
  cache: ExpertCache | undefined;
  /** The default budget's cache, which gives arenas back under memory pressure (absent under an explicit budget). */
  elastic: ElasticCache | undefined;
  store: StreamedExperts | undefined;
  files: StreamFiles | undefined;
  /** The learned hotlist's path (a container with experts), read at open and written by learn. */
  usageFile: string | undefined;
  /** With the open option `learn`: how often to save the learned hot set while open (ms; 0: only at close), and the save, which returns false when it could not write. */
  learn: { everyMs: number; save(): boolean } | undefined;
  /** The reserved sessions' states, allocated at open so the budget covers them from the start. */
  states: SequenceState[];
  /** The vision tower, when the model has one and room was reserved for it: loaded by the first image. */
  vision: VisionParts | undefined;
  /** The tokenizer (null: the directory has none) and the chat format, read and checked against each other at open. */
  text: { tokenizer: Tokenizer | null; format?: ChatFormat };
  /** Release what the model holds (threads, descriptors), after its last forward pass. */
  close(): Promise<void>;
}

/** Cache statistics of a model without expert banks. */
export const NO_CACHE: CacheStats = { slots: 0, hits: 0, misses: 0, bytesRead: 0, speculativeReads: 0, speculativeUsed: 0, speculativeBytes: 0, readWaitSeconds: 0, warmed: 0 };

/**
 * A budget is a ceiling the cache is sized to: one above what the machine can hold would size a
 * cache that pages, where hits become page faults. Such a budget is lowered to usable RAM, and
 * the caller told.
 */
export function withinRam(budget: number | undefined, usable: number, warn: (m: string) => void): number | undefined {
  if (budget === undefined || budget <= usable) return budget;
  warn(`the budget of ${formatSize(budget)} is more than the ${formatSize(usable)} of usable RAM on this machine; using ${formatSize(usable)}`);
  return usable;
}

/**
 * The learned hotlist written at close and every learnEvery seconds: a directory that cannot be
 * written (read-only, another user's) is a note, not a failure of the run that learned it.
 */
function saveLearned(cache: ExpertCache, file: string, warn: (m: string) => void): boolean {
  try {
    cache.saveUsage(file);
    return true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    warn(`the learned hot set was not saved to ${file}${code ? ` (${code}${code === 'EACCES' || code === 'EROFS' || code === 'EPERM' ? ': the directory is not writable' : ''})` : `: ${(e as Error).message}`}; the next open starts cold (turn learning off with --no-learn, or learn: false)`);
    return false;
  }
}

/** Where a model's weights come from, opened and checked, and what its architecture is. */
interface Opened {
  kind: 'container' | 'checkpoint';
  container?: Container;
  config: ModelConfig;
  arch: Architecture;
  source: WeightSource;
  close(): void;
}

function openSource(dir: string, o: ResolvedOpenOptions): Opened {
  // a checkpoint folder (config.json and safetensors) is run with every weight in f32: the reference
  if (isCheckpointDir(dir)) return { kind: 'checkpoint', ...openModelCheckpoint(dir) };
  const container = openModelContainer(dir, { verify: o.verify });
  if (container.manifest.sparse) {
    container.close();
    throw new WasteError('E_ARG', `${dir} is a sparse container (sizes only, written by waste synth --sparse): plan and info describe it, nothing can run on it`);
  }
  if (o.verify) {
    // what has no checksum is not verified: say so rather than run as if it were
    const sums = container.manifest.checksums;
    const unsummed = [TRUNK, ...(container.codebooks ? [CODEBOOKS] : [])].filter((f) => !sums.has(f));
    const unchecked = [...(unsummed.length ? [`${unsummed.join(' and ')} (manifest.json has no checksum for ${unsummed.length > 1 ? 'them' : 'it'})`] : []), ...(container.manifest.digest ? [] : ["manifest.json's own values (it has no manifest_sha256)"])];
    if (unchecked.length) o.warn(`${dir}: --verify could not check ${unchecked.join(', nor ')}; waste verify reports it UNVERIFIED`);
  }
  return { kind: 'container', container, config: container.config, arch: architecture(container.config.arch), source: new ContainerSource(container), close: () => container.close() };
}

/** A model's vision tower: its spec, the bytes of the arena it loads into, and (once open) the budget set aside for it. */
export interface VisionParts {
  spec: VisionSpec;
  bytes: number;
  source: WeightSource;
  budget?: MemoryBudget;
}

/**
 * A model's vision tower as the plan reserves it, with room for images of up to `patches` patches
 * (default: the model's `max_patches`).
 */
export function visionOf(arch: Architecture, dir: string, src: { kind: 'container' | 'checkpoint'; source: WeightSource }, cfg: ModelConfig, threads: number, chunk: number, patches?: number, warn?: (m: string) => void): VisionParts | undefined {
  const found = arch.vision?.spec(dir, src.kind, src.source, cfg, warn);
  if (!found) return undefined;
  const spec = { ...found, towerLimit: patches ?? found.maxPatches };
  const p = arch.vision!.plan(src.source, spec);
  // the kernels stage activations in every arena they bind as wide as the model's widest product
  const kernel = kernelArenaBytes(Math.max(p.widest, arch.widestInput(cfg)), Math.max(p.rows, chunk), threads);
  return { spec, bytes: p.bytes + kernel + 64 * 1024, source: src.source };
}

/**
 * Open a model, one step for every kind of model: resolve its name, read its config with its
 * architecture, plan memory, refuse a budget below the floor, create the arenas, load the trunk,
 * start the kernels and (for a container) the expert cache and its readers, and build the forward
 * pass. Anything that fails on the way releases what was made before it.
 */
export async function assemble(model: string, opts: OpenOptions): Promise<ModelParts> {
  const dir = resolveModel(model);
  const o = resolveOpenOptions(opts, cpuCount());
  const { threads, ioThreads, chunk, maxContext, sessions } = o;
  const src = openSource(dir, o);
  const { config: cfg, arch, container } = src;
  // a stored model in use is not removed by `waste rm` without --force
  const inUse = markInUse(dir);
  let kernels: Kernels | undefined;
  let files: StreamFiles | undefined;
  let readers: ReaderPool | undefined;
  try {
    // before the weights load: a model whose chat markup its tokenizer cannot read is refused at once
    const text = openModelText(dir, { native: arch.chatFormat, modelVocab: cfg.vocab }) ?? { tokenizer: null };
    let stride = 0;
    for (const b of container?.banks.values() ?? []) stride = Math.max(stride, b.stride);
    const vision = o.vision ? visionOf(arch, dir, src, cfg, threads, chunk, o.imagePatches, o.warn) : undefined;
    const plan = planFor(arch, cfg, arch.planWeights(src.source, cfg, container?.quant), stride, container?.quant, { maxContext, chunk, threads, sessions, arenaBytes: o.arenaBytes, visionBytes: vision?.bytes, cacheArenaBytes: o.cacheArenaBytes, ram: o.ram });
    let budgetBytes: number;
    if (src.kind === 'checkpoint') {
      if (plan.floorBytes > plan.ram.usable)
        throw new WasteError('E_ARG', `the unquantized reference holds every weight in f32: it needs ${formatSize(plan.floorBytes)}, more than the ${formatSize(plan.ram.usable)} of usable RAM`);
      budgetBytes = withinRam(o.budget, plan.ram.usable, o.warn) ?? plan.floorBytes;
    } else if (o.cacheSlots !== undefined) budgetBytes = plan.layoutForSlots(o.cacheSlots).bytes;
    // preloading every expert sizes the cache for all of them unless a budget says otherwise
    else {
      // with no budget given, a floor the machine cannot hold would page until the system kills it
      if (o.budget === undefined && plan.floorBytes > plan.ram.usable)
        throw new WasteError('E_ARG', `this model's floor is ${formatSize(plan.floorBytes)} (trunk, state for ${maxContext} tokens, scratch${plan.visionBytes ? ', the vision tower' : ''} and two layers' experts), more than the ${formatSize(plan.ram.usable)} of usable RAM on this machine; it cannot open here (a smaller --ctx lowers the state)`);
      budgetBytes = withinRam(o.budget, plan.ram.usable, o.warn) ?? (o.preloadExperts ? plan.layout(Number.MAX_SAFE_INTEGER).bytes : plan.defaultBudget);
    }
    // the default budget's cache can give memory back: its slots go in arenas it can drop one by one
    const elastic = src.kind === 'container' && !!container?.banks.size && o.budget === undefined && o.cacheSlots === undefined && !o.preloadExperts;
    const layout = o.cacheSlots !== undefined && src.kind === 'container' ? plan.layoutForSlots(o.cacheSlots) : elastic ? plan.elasticLayout(budgetBytes) : plan.layout(budgetBytes);
    if (o.preloadExperts && layout.slots < plan.totalExperts)
      throw new WasteError('E_ARG', `preloading every expert needs a budget of at least ${plan.layout(Number.MAX_SAFE_INTEGER).bytes} bytes`);
    const budget = new MemoryBudget(budgetBytes);
    // the tower's room is kept from sessions and the cache until an image loads it
    if (vision) vision.budget = budget.reserve(plan.visionBytes, "the vision tower's room");
    const arenas = layout.arenas.map((a) => new Arena(a.bytes - ARENA_RESERVED, budget));
    const of: Arena[] = [];
    layout.arenas.forEach((a, i) => a.groups.forEach((g) => (of[g] = arenas[i])));

    const layerArenas = new Set(of);
    kernels =
      o.kernels === 'typescript'
        ? makeTsKernels(o.activations)
        : await WasmKernels.create(threads, arenas, { model: { widest: arch.widestInput(cfg), chunk, prepIn: (a) => layerArenas.has(a) }, activations: o.activations });
    let cache: ExpertCache | undefined;
    let store: StreamedExperts | undefined;
    const groups: { arena: Arena; slots: number; bytes: number }[] = [];
    if (container?.banks.size) {
      const probe = { arena: arenas[0], off: arenas[0].alloc(8192, 4096) };
      const slots: { arena: Arena; off: number }[] = [];
      layout.arenas.forEach((a, i) => {
        if (!a.slots) return;
        const base = arenas[i].alloc(a.slots * stride, 4096);
        for (let k = 0; k < a.slots; k++) slots.push({ arena: arenas[i], off: base + k * stride });
        groups.push({ arena: arenas[i], slots: a.slots, bytes: a.bytes });
      });
      files = openStreamFiles(container, o.direct, probe);
      const payloadEnd = [...container.banks.values()][0].layout.payloadEnd;
      if (ioThreads > 0) readers = await ReaderPool.create(ioThreads, slots.length, arenas, o.verify ? payloadEnd : 0);
      cache = new ExpertCache(container, files, slots, stride, o.cachePolicy, readers, o.verify);
      // nothing made here may keep a dropped arena alive
      slots.length = 0;
      store = new StreamedExperts(cache, o.lookahead, o.lookaheadLayers);
    }
    const record = container?.banks.size ? [...container.banks.values()][0].layout : undefined;
    const net = arch.build({ cfg, source: src.source, of, arenas, kernels, experts: store, quant: container?.quant, record, chunk, maxContext, onProgress: o.onProgress });
    const states: SequenceState[] = [];
    for (let i = 0; i < sessions; i++) states.push(net.newState(maxContext));
    const usageFile = cache ? path.resolve(o.usageFile ?? path.join(dir, USAGE_FILE)) : undefined;
    if (cache && o.preloadExperts) cache.preloadAll();
    else if (cache && o.warm) cache.warm(usageFile!);
    const elasticCache =
      elastic && cache
        ? new ElasticCache({ cache, kernels, net, readers, budget, stride, groups: groups.splice(0), floorSlots: plan.floorRecords, marginBytes: plan.osMarginBytes, sample: o.memorySample, now: o.clock })
        : undefined;
    groups.length = 0;
    const k = kernels;
    const r = readers;
    const f = files;
    // a model that computed nothing since the last save learned nothing new: the hotlist stays as
    // it was; false when the save failed (the next one, at close() at the latest, tries again)
    let savedAt = 0;
    const saveIfLearned = (c: ExpertCache): boolean => {
      const work = c.stats.hits + c.stats.misses;
      if (work === savedAt) return true;
      const ok = saveLearned(c, usageFile!, o.warn);
      if (ok) savedAt = work;
      return ok;
    };
    return {
      dir,
      kind: src.kind,
      container,
      config: cfg,
      arch,
      net,
      kernels,
      threads,
      plan,
      budget,
      cache,
      elastic: elasticCache,
      store,
      files,
      usageFile,
      learn: o.learn && cache ? { everyMs: o.learnEvery * 1000, save: () => saveIfLearned(cache) } : undefined,
      states,
      vision,
      text,
      async close() {
        try {
          cache?.drain();
        } catch {
          /* closing regardless */
        }
        if (o.learn && cache) saveIfLearned(cache);
        if (k instanceof WasmKernels) await k.close();
        await r?.close();
        f?.close();
        src.close();
        inUse();
      },
    };
  } catch (e) {
    if (kernels instanceof WasmKernels) await kernels.close();
    await readers?.close();
    files?.close();
    src.close();
    inUse();
    throw e;
  }
}
