import { type Container, openContainer } from './container/open.js';
import type { Kernels } from './kernels/types.js';
import { tsKernels } from './kernels/ts/index.js';
import { KimiLinearModel } from './model/kimi-linear/forward.js';
import type { KimiLinearState } from './model/kimi-linear/state.js';
import { bindWeights } from './model/kimi-linear/weights.js';
import type { KimiLinearConfig } from './model/kimi-linear/config.js';
import { DirectExpertReader, type ExpertStats } from './runtime/experts.js';

export interface OpenOptions {
  /** Check every expert record's CRC32 as it is read (off by default: a pass per read). */
  verify?: boolean;
  /** Kernel implementation (defaults to the TypeScript reference). */
  kernels?: Kernels;
  /** Tokens per prefill chunk. */
  chunk?: number;
}

export interface SessionOptions {
  /** Longest sequence the session may hold (default 4096). */
  maxContext?: number;
}

/** A model opened from a container directory: the trunk resident, the experts on disk. */
export class Model {
  readonly container: Container;
  readonly config: KimiLinearConfig;
  private readonly net: KimiLinearModel;
  private readonly reader: DirectExpertReader;

  private constructor(container: Container, net: KimiLinearModel, reader: DirectExpertReader) {
    this.container = container;
    this.config = container.config;
    this.net = net;
    this.reader = reader;
  }

  static open(dir: string, opts: OpenOptions = {}): Model {
    const container = openContainer(dir);
    try {
      const weights = bindWeights(container, container.config);
      const reader = new DirectExpertReader(container, opts.verify ?? false);
      const net = new KimiLinearModel(container, weights, opts.kernels ?? tsKernels, reader, opts.chunk ?? 16);
      return new Model(container, net, reader);
    } catch (e) {
      container.close();
      throw e;
    }
  }

  newSession(opts: SessionOptions = {}): Session {
    return new Session(this.net, this.net.newState(opts.maxContext ?? 4096));
  }

  get expertStats(): ExpertStats {
    return this.reader.stats;
  }

  close(): void {
    this.container.close();
  }
}

/** One sequence: its recurrent state, latent cache and position. */
export class Session {
  constructor(
    private readonly net: KimiLinearModel,
    private readonly state: KimiLinearState,
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
    return this.net.forward(this.state, ids, opts);
  }

  reset(): void {
    this.state.reset();
  }
}
