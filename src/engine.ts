import { type Container, openContainer } from './container/open.js';
import type { Kernels } from './kernels/types.js';
import { tsKernels } from './kernels/ts/index.js';
import { WasmKernels } from './kernels/wasm/index.js';
import { cpuCount } from './kernels/wasm/pool.js';
import type { Arena } from './memory/arena.js';
import { KimiLinearModel } from './model/kimi-linear/forward.js';
import type { KimiLinearState } from './model/kimi-linear/state.js';
import { loadWeights } from './model/kimi-linear/weights.js';
import type { KimiLinearConfig } from './model/kimi-linear/config.js';
import { DirectExpertReader, type ExpertSource, type ExpertStats, PreloadedExperts } from './runtime/experts.js';
import { WasteError } from './util/errors.js';

export interface OpenOptions {
  /** Check every expert record's CRC32 as it is read (off by default: a pass per read). */
  verify?: boolean;
  /** Compute threads, the calling thread included (default: one per core). */
  threads?: number;
  /** 'wasm' (default): WebAssembly SIMD kernels; 'typescript': the plain reference kernels. */
  kernels?: 'wasm' | 'typescript';
  /** Tokens per prefill chunk (default 16). */
  chunk?: number;
  /** Longest sequence any session may hold (default 4096). */
  maxContext?: number;
  /** Cap on one arena's size (default: the 4 GiB a memory can address); for tests. */
  arenaBytes?: number;
  /** Read every expert into memory at open instead of from disk per use (benchmarks, small models). */
  preloadExperts?: boolean;
}

export interface SessionOptions {
  /** Longest sequence this session may hold (default: the model's maximum). */
  maxContext?: number;
}

/** Per-thread kernel scratch reserved in each arena (see WasmKernels). */
const KERNEL_TMP_PER_THREAD = 64 * 1024;

/** A model opened from a container directory: the trunk resident in arenas, the experts on disk. */
export class Model {
  readonly container: Container;
  readonly config: KimiLinearConfig;
  readonly kernels: Kernels;
  readonly threads: number;
  private readonly net: KimiLinearModel;
  private readonly reader: ExpertSource;
  private readonly freeStates: KimiLinearState[] = [];
  private closed = false;

  private constructor(container: Container, net: KimiLinearModel, reader: ExpertSource, kernels: Kernels, threads: number) {
    this.container = container;
    this.config = container.config;
    this.net = net;
    this.reader = reader;
    this.kernels = kernels;
    this.threads = threads;
  }

  static async open(dir: string, opts: OpenOptions = {}): Promise<Model> {
    const threads = opts.threads ?? cpuCount();
    if (!(Number.isInteger(threads) && threads >= 1 && threads <= 256))
      throw new WasteError('E_ARG', `threads must be an integer in 1..256 (got ${threads})`);
    const chunk = opts.chunk ?? 16;
    const maxContext = opts.maxContext ?? 4096;
    if (!(Number.isInteger(maxContext) && maxContext >= 1 && maxContext <= 1 << 24))
      throw new WasteError('E_ARG', `context length must be an integer in 1..${1 << 24} (got ${maxContext})`);
    const container = openContainer(dir);
    let kernels: Kernels | undefined;
    try {
      const cfg = container.config;
      let stride = 0;
      for (const b of container.banks.values()) stride = Math.max(stride, b.stride);
      const perArena =
        KimiLinearModel.scratchBytes(cfg, chunk, maxContext, container.quant) + stride + 4096 + threads * KERNEL_TMP_PER_THREAD + 4096;
      const weights = loadWeights(container, cfg, perArena, opts.arenaBytes);
      // Expert records land in the arena of the layer that computes with them.
      const staging = new Map<Arena, Uint8Array>();
      if (stride) for (const a of weights.arenas) staging.set(a, a.u8(a.alloc(stride, 4096), stride));
      kernels = opts.kernels === 'typescript' ? tsKernels : await WasmKernels.create(threads, weights.arenas);
      const reader: ExpertSource = opts.preloadExperts
        ? new PreloadedExperts(container, opts.verify ?? false, (L) => weights.layers[L].arena)
        : new DirectExpertReader(container, opts.verify ?? false, (L) => staging.get(weights.layers[L].arena)!);
      const net = new KimiLinearModel(container, weights, kernels, reader, chunk, maxContext);
      return new Model(container, net, reader, kernels, opts.kernels === 'typescript' ? 1 : threads);
    } catch (e) {
      if (kernels instanceof WasmKernels) await kernels.close();
      container.close();
      throw e;
    }
  }

  /** A new sequence (reusing the state of a closed session when one fits). */
  newSession(opts: SessionOptions = {}): Session {
    if (this.closed) throw new WasteError('E_STATE', 'the model has been closed');
    const ctx = opts.maxContext ?? this.net.maxContext;
    const i = this.freeStates.findIndex((s) => s.maxContext === ctx);
    const state = i >= 0 ? this.freeStates.splice(i, 1)[0] : this.net.newState(ctx);
    state.reset();
    return new Session(this.net, state, (s) => this.freeStates.push(s));
  }

  /** Start adding up wall time per phase ("kda", "mla", "moe", "dense", "head", in ms); returns the tally. */
  profile(): Record<string, number> {
    return (this.net.profile = {});
  }

  /** The memories holding the trunk, scratch and session state. */
  get arenas(): readonly Arena[] {
    return this.net.weights.arenas;
  }

  get expertStats(): ExpertStats {
    return this.reader.stats;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.kernels instanceof WasmKernels) await this.kernels.close();
    this.container.close();
  }
}

/** One sequence: its recurrent state, latent cache and position. */
export class Session {
  private released = false;

  constructor(
    private readonly net: KimiLinearModel,
    private readonly state: KimiLinearState,
    private readonly release: (s: KimiLinearState) => void,
  ) {}

  /** Tokens consumed so far. */
  get position(): number {
    return this.state.pos;
  }

  /**
   * Feed tokens and return the logits after the last one (`vocab_size` floats), or after every
   * one (row after row) with `allLogits`. Works for a prompt (prefill) and for one token (decode).
   */
  forward(ids: ArrayLike<number>, opts: { allLogits?: boolean } = {}): Promise<Float32Array> {
    if (this.released) return Promise.reject(new WasteError('E_STATE', 'the session has been closed'));
    return this.net.forward(this.state, ids, opts);
  }

  reset(): void {
    this.state.reset();
  }

  /** Give the session's memory back to the model for reuse. */
  close(): void {
    if (this.released) return;
    this.released = true;
    this.release(this.state);
  }
}
