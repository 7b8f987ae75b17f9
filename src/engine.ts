import * as fs from 'node:fs';
import * as path from 'node:path';
import { readCheckpointConfig } from './checkpoint/config.js';
import { SafetensorsSet } from './checkpoint/safetensors.js';
import { CheckpointSource } from './model/sources/checkpoint-source.js';
import { formatSize } from './util/size.js';
import { type Container, openContainer } from './container/open.js';
import type { Kernels } from './kernels/types.js';
import { tsKernels } from './kernels/ts/index.js';
import { WasmKernels } from './kernels/wasm/index.js';
import { cpuCount } from './kernels/wasm/pool.js';
import { ARENA_RESERVED, Arena } from './memory/arena.js';
import { MemoryBudget } from './memory/budget.js';
import { KimiLinearModel } from './model/kimi-linear/forward.js';
import type { KimiLinearState } from './model/kimi-linear/state.js';
import { loadWeights, planWeights } from './model/kimi-linear/weights.js';
import { ContainerSource } from './model/sources/container-source.js';
import type { KimiLinearConfig } from './model/kimi-linear/config.js';
import { type CachePolicy, type CacheStats, ExpertCache } from './runtime/cache.js';
import { type StreamFiles, openStreamFiles } from './runtime/io.js';
import { DEFAULT_CHUNK, type MemoryPlan, planFor, planMemory } from './runtime/plan.js';
import { ReaderPool } from './runtime/readers.js';
import { Session, type SessionHost } from './session.js';
import { Chat, type ChatOptions } from './generate/chat.js';
import { type GenerationDefaults, readGenerationDefaults } from './generate/defaults.js';
import { type ChatFormat, loadChatFormat } from './tokenizer/chat.js';
import { loadTokenizer, noTokenizer } from './tokenizer/load.js';
import type { Tokenizer } from './tokenizer/tokenizer.js';
import { modelIdentity } from './runtime/identity.js';
import { WasteError } from './util/errors.js';
import { resolveModel } from './store/names.js';

import { type OpenOptions, type ResolvedOpenOptions, resolveOpenOptions } from './open-options.js';
export type { OpenOptions };

export interface SessionOptions {
  /** Longest sequence this session may hold (default and maximum: the model's). */
  maxContext?: number;
}

export interface ModelStats extends CacheStats {
  /** Demand hits ÷ demand requests. */
  hitRate: number;
  /** True when expert reads bypass the page cache. */
  direct: boolean;
  directNote?: string;
  budgetBytes: number;
  floorBytes: number;
  /** Bytes the engine has allocated (arenas), never above the budget. */
  allocatedBytes: number;
  lookahead: number;
  lookaheadPredicted: number;
  lookaheadCorrect: number;
}

/**
 * A budget is a ceiling the cache is sized to: one above what the machine can hold would size a
 * cache that pages, where hits become page faults. Such a budget is lowered to usable RAM, and
 * the caller told.
 */
function withinRam(budget: number | undefined, usable: number, warn: (m: string) => void): number | undefined {
  if (budget === undefined || budget <= usable) return budget;
  warn(`the budget of ${formatSize(budget)} is more than the ${formatSize(usable)} of usable RAM on this machine; using ${formatSize(usable)}`);
  return usable;
}

/** The name of the learned hotlist next to a container. */
export const USAGE_FILE = 'usage.waste';

/**
 * A model opened from a container directory: the trunk resident in arenas, the experts streamed
 * from disk into a budgeted cache.
 */
export class Model implements SessionHost {
  /** The model directory (a container, or a HuggingFace checkpoint). */
  readonly dir: string;
  /** The container (absent when the model was opened from a HuggingFace checkpoint). */
  readonly container: Container | undefined;
  /** Where the weights came from: a container, or a checkpoint (the unquantized reference). */
  readonly kind: 'container' | 'checkpoint';
  readonly config: KimiLinearConfig;
  readonly kernels: Kernels;
  readonly threads: number;
  readonly plan: MemoryPlan;
  readonly budget: MemoryBudget;
  readonly cache: ExpertCache | undefined;
  /** @internal the forward pass (sessions run through it). */
  readonly net: KimiLinearModel;
  private readonly freeStates: KimiLinearState[] = [];
  private readonly files: StreamFiles | undefined;
  private readonly readers: ReaderPool | undefined;
  private readonly closeSource: (() => void) | undefined;
  private closed = false;
  private tok: Tokenizer | null | undefined;
  private chatFmt: ChatFormat | undefined;
  private genDefaults: GenerationDefaults | undefined;
  private digest: Uint8Array | undefined;
  private running: Promise<unknown> = Promise.resolve();

  private constructor(p: {
    dir: string;
    container?: Container;
    config: KimiLinearConfig;
    net: KimiLinearModel;
    kernels: Kernels;
    threads: number;
    plan: MemoryPlan;
    budget: MemoryBudget;
    cache?: ExpertCache;
    files?: StreamFiles;
    readers?: ReaderPool;
    close?: () => void;
  }) {
    this.dir = p.dir;
    this.container = p.container;
    this.kind = p.container ? 'container' : 'checkpoint';
    this.config = p.config;
    this.closeSource = p.close;
    this.net = p.net;
    this.kernels = p.kernels;
    this.threads = p.threads;
    this.plan = p.plan;
    this.budget = p.budget;
    this.cache = p.cache;
    this.files = p.files;
    this.readers = p.readers;
  }

  /**
   * Open a model: `demo` (the demo model that ships with the package), a WASTE container directory,
   * or a HuggingFace checkpoint directory (config.json and
   * safetensors): then every weight is loaded as f32 and the experts are dense — the unquantized
   * reference that quality is measured against.
   */
  static async open(model: string, opts: OpenOptions = {}): Promise<Model> {
    const dir = resolveModel(model);
    const o = resolveOpenOptions(opts, cpuCount());
    if (!fs.existsSync(path.join(dir, 'manifest.json')) && fs.existsSync(path.join(dir, 'config.json'))) return Model.openCheckpoint(dir, o);
    const { threads, ioThreads, lookahead, chunk, maxContext, sessions } = o;

    const container = openContainer(dir, { verify: o.verify });
    let kernels: Kernels | undefined;
    let files: StreamFiles | undefined;
    let readers: ReaderPool | undefined;
    try {
      const cfg = container.config;
      const plan = planMemory(container, { maxContext, chunk, threads, sessions, arenaBytes: o.arenaBytes });
      // Preloading every expert sizes the cache for all of them unless a budget says otherwise.
      const budgetBytes =
        o.cacheSlots !== undefined
          ? plan.layoutForSlots(o.cacheSlots).bytes
          : (withinRam(o.budget, plan.ram.usable, o.warn) ?? (o.preloadExperts ? plan.layout(Number.MAX_SAFE_INTEGER).bytes : plan.defaultBudget));
      const layout = o.cacheSlots !== undefined ? plan.layoutForSlots(o.cacheSlots) : plan.layout(budgetBytes);
      if (o.preloadExperts && layout.slots < plan.totalExperts)
        throw new WasteError('E_ARG', `preloading every expert needs a budget of at least ${plan.layout(Number.MAX_SAFE_INTEGER).bytes} bytes`);
      const budget = new MemoryBudget(budgetBytes);
      const arenas = layout.arenas.map((a) => new Arena(a.bytes - ARENA_RESERVED, budget));
      const of: Arena[] = [];
      layout.arenas.forEach((a, i) => a.groups.forEach((g) => (of[g] = arenas[i])));
      const source = new ContainerSource(container);
      const weights = loadWeights(source, cfg, of, arenas, container.quant, (L, out) => source.fillBooks(L, out), o.onProgress);
      kernels = o.kernels === 'typescript' ? tsKernels : await WasmKernels.create(threads, arenas, { cfg, chunk });
      const probe = { arena: arenas[0], off: arenas[0].alloc(8192, 4096) };

      let cache: ExpertCache | undefined;
      if (container.banks.size) {
        let stride = 0;
        for (const b of container.banks.values()) stride = Math.max(stride, b.stride);
        const slots: { arena: Arena; off: number }[] = [];
        layout.arenas.forEach((a, i) => {
          if (!a.slots) return;
          const base = arenas[i].alloc(a.slots * stride, 4096);
          for (let k = 0; k < a.slots; k++) slots.push({ arena: arenas[i], off: base + k * stride });
        });
        files = openStreamFiles(container, o.direct, probe);
        const payloadEnd = [...container.banks.values()][0].layout.payloadEnd;
        if (ioThreads > 0) readers = await ReaderPool.create(ioThreads, slots.length, arenas, o.verify ? payloadEnd : 0);
        cache = new ExpertCache(container, files, slots, stride, o.cachePolicy, readers, o.verify);
      }
      const record = container.banks.size ? [...container.banks.values()][0].layout : undefined;
      const net = new KimiLinearModel(cfg, { ...weights, arenas }, kernels, cache, container.quant, record, chunk, maxContext);
      net.lookahead = lookahead;
      const model = new Model({ dir, container, config: cfg, net, kernels, threads, plan, budget, cache, files, readers, close: () => container.close() });
      // the reserved sessions' state, allocated now so the budget covers it from the start
      for (let i = 0; i < sessions; i++) model.freeStates.push(net.newState(maxContext));
      if (cache && o.preloadExperts) cache.preloadAll();
      else if (cache && o.warm) cache.warm(path.join(dir, USAGE_FILE));
      return model;
    } catch (e) {
      if (kernels instanceof WasmKernels) await kernels.close();
      await readers?.close();
      files?.close();
      container.close();
      throw e;
    }
  }

  private static async openCheckpoint(dir: string, o: ResolvedOpenOptions): Promise<Model> {
    const { threads, chunk, maxContext, sessions } = o;
    const { cfg } = readCheckpointConfig(dir);
    const st = SafetensorsSet.open(dir);
    let kernels: Kernels | undefined;
    try {
      const source = new CheckpointSource(st);
      const plan = planFor(cfg, planWeights(source, cfg), 0, undefined, { maxContext, chunk, threads, sessions, arenaBytes: o.arenaBytes });
      if (plan.floorBytes > plan.ram.usable)
        throw new WasteError('E_ARG', `the unquantized reference holds every weight in f32: it needs ${formatSize(plan.floorBytes)}, more than the ${formatSize(plan.ram.usable)} of usable RAM`);
      const budgetBytes = withinRam(o.budget, plan.ram.usable, o.warn) ?? plan.floorBytes;
      const layout = plan.layout(budgetBytes);
      const budget = new MemoryBudget(budgetBytes);
      const arenas = layout.arenas.map((a) => new Arena(a.bytes - ARENA_RESERVED, budget));
      const of: Arena[] = [];
      layout.arenas.forEach((a, i) => a.groups.forEach((g) => (of[g] = arenas[i])));
      const weights = loadWeights(source, cfg, of, arenas, undefined, undefined, o.onProgress);
      kernels = o.kernels === 'typescript' ? tsKernels : await WasmKernels.create(threads, arenas, { cfg, chunk });
      const net = new KimiLinearModel(cfg, { ...weights, arenas }, kernels, undefined, undefined, undefined, chunk, maxContext);
      const model = new Model({ dir, config: cfg, net, kernels, threads, plan, budget, close: () => st.close() });
      for (let i = 0; i < sessions; i++) model.freeStates.push(net.newState(maxContext));
      return model;
    } catch (e) {
      if (kernels instanceof WasmKernels) await kernels.close();
      st.close();
      throw e;
    }
  }

  /** A new sequence (reusing the state of a closed session when one fits). */
  newSession(opts: SessionOptions = {}): Session {
    if (this.closed) throw new WasteError('E_STATE', 'the model has been closed');
    const ctx = opts.maxContext ?? this.net.maxContext;
    if (!(Number.isInteger(ctx) && ctx >= 1)) throw new WasteError('E_ARG', `a session's context (maxContext) must be a positive integer (got ${String(ctx)})`);
    const i = this.freeStates.findIndex((s) => s.maxContext >= ctx);
    let state: KimiLinearState;
    if (i >= 0) state = this.freeStates.splice(i, 1)[0];
    else {
      try {
        state = this.net.newState(ctx);
      } catch (e) {
        if (e instanceof WasteError && e.code === 'E_STATE' && /RAM budget/.test(e.message))
          throw new WasteError('E_STATE', `no memory for another session (${e.message}): close a session first, or open the model with { sessions: N } to reserve room for N at once`);
        throw e;
      }
    }
    state.reset();
    state.limit = ctx;
    return new Session(this, state);
  }

  /** A new sequence for raw continuation (the same as newSession). */
  session(opts: SessionOptions = {}): Session {
    return this.newSession(opts);
  }

  /** A conversation in the model's chat format, on a session of its own. */
  chat(opts: ChatOptions = {}): Chat {
    return new Chat(this.newSession(opts), this.tokenizer(), opts.format ?? this.chatFormat(), this.config.eosTokenIds, opts);
  }

  /** @internal */
  release(state: KimiLinearState): void {
    this.freeStates.push(state);
  }

  /** @internal one forward pass at a time, in the order asked: every session computes in the same scratch. */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.running.then(fn);
    this.running = run.catch(() => undefined);
    return run;
  }

  /** The model's tokenizer (loaded on first use); a clear error when the directory has none. */
  tokenizer(): Tokenizer {
    if (this.tok === undefined) this.tok = loadTokenizer(this.dir, { modelVocab: this.config.vocab }) ?? null;
    if (!this.tok) throw noTokenizer(this.dir);
    return this.tok;
  }

  /** The chat format: chat.json, the Jinja chat template, or Kimi's default. */
  chatFormat(): ChatFormat {
    return (this.chatFmt ??= loadChatFormat(this.dir));
  }

  /** The sampling settings of the model's generation_config.json (empty when it has none); explicit options win. */
  generationDefaults(): GenerationDefaults {
    return (this.genDefaults ??= readGenerationDefaults(this.dir));
  }

  /** Text to ids: plain mode (control-token strings are ordinary text) unless `markup`. */
  tokenize(text: string, opts: { markup?: boolean } = {}): number[] {
    return this.tokenizer().encode(text, opts);
  }

  detokenize(ids: ArrayLike<number>): string {
    return this.tokenizer().decode(ids);
  }

  /** @internal a digest of what the weights are: a saved session loads only into the model it came from. */
  identity(): Uint8Array {
    return (this.digest ??= modelIdentity(this.dir, this.kind));
  }

  /** Start adding up wall time per phase ("kda", "mla", "moe", "dense", "head", in ms); returns the tally. */
  profile(): Record<string, number> {
    return (this.net.profile = {});
  }

  /** Replace the router's choices with a recorded trace (benchmarks only: the output is meaningless). */
  setRouteOverride(fn: ((layer: number) => number[] | undefined) | undefined): void {
    this.net.routeOverride = fn;
  }

  /** Watch the router: for each MoE layer, the experts chosen for each token ([T][topK]); the view is only valid during the call. */
  observeRoutes(fn: ((layer: number, route: Int32Array, T: number) => void) | undefined): void {
    this.net.routeObserver = fn;
  }

  /** The memories holding the trunk, scratch, session state and expert cache. */
  get arenas(): readonly Arena[] {
    return this.net.weights.arenas;
  }

  stats(): ModelStats {
    const c = this.cache?.stats ?? { slots: 0, hits: 0, misses: 0, bytesRead: 0, speculativeReads: 0, speculativeUsed: 0, speculativeBytes: 0, readWaitSeconds: 0, warmed: 0 };
    const demand = c.hits + c.misses;
    return {
      ...c,
      hitRate: demand ? c.hits / demand : 0,
      direct: this.files?.direct ?? false,
      directNote: this.files?.note,
      budgetBytes: this.budget.limit,
      floorBytes: this.plan.floorBytes,
      allocatedBytes: this.budget.used,
      lookahead: this.net.lookahead,
      lookaheadPredicted: this.net.lookaheadStats.predicted,
      lookaheadCorrect: this.net.lookaheadStats.correct,
    };
  }

  /** Write the experts the cache holds now to the container's usage.waste, for a warm next open. */
  saveUsage(file?: string): number {
    if (!this.cache || !this.container) return 0;
    return this.cache.saveUsage(file ?? path.join(this.container.dir, USAGE_FILE));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    try {
      this.cache?.drain();
    } catch {
      /* closing regardless */
    }
    if (this.kernels instanceof WasmKernels) await this.kernels.close();
    await this.readers?.close();
    this.files?.close();
    this.closeSource?.();
  }
}
