import * as fs from 'node:fs';
import * as path from 'node:path';
import { readCheckpointConfig } from '../checkpoint/config.js';
import type { JsonObject } from '../util/fields.js';
import { SafetensorsSet } from '../checkpoint/safetensors.js';
import { CODEBOOKS } from '../container/codebooks.js';
import { TRUNK } from '../container/trunk.js';
import { writeManifest } from '../container/write.js';
import { writeFileAtomic } from '../util/write-atomic.js';
import { WasmKernels } from '../kernels/wasm/index.js';
import { cpuCount } from '../kernels/wasm/pool.js';
import { Arena } from '../memory/arena.js';
import { CheckpointWeights } from '../checkpoint/weights.js';
import { architectureOf } from '../model/registry.js';
import { visionFiles } from './vision.js';
import { CheckpointSource } from '../model/sources/checkpoint-source.js';
import { safePoint } from '../util/abort.js';
import { WasteError, fromSystemError, isDiskFull } from '../util/errors.js';
import { formatSize } from '../util/size.js';
import { ExpertEncoder } from './experts.js';
import { Job, STATE_FILE } from './job.js';
import { type ConvertPlan, type ConvertSettings, DEFAULT_SETTINGS, planConversion } from './plan.js';
import { copyTokenizerFiles } from './tokenizer-files.js';
import { writeTrunk } from './trunk.js';
import { readBytes } from '../util/read.js';

export interface ConvertOptions extends Partial<ConvertSettings> {
  /** Threads for the k-means and encoding kernels (default: every core). */
  threads?: number;
  /** Replace an existing container at the output path (it stays intact until the new one is published). */
  force?: boolean;
  /** Source bytes converted so far, out of the total; `what` names the unit at work. */
  onProgress?: (done: number, total: number, what: string) => void;
  /** Notes for the user (resuming, starting over, files copied). */
  log?: (line: string) => void;
  /** Free bytes on the file system holding `dir` (default: statfs). */
  freeSpace?: (dir: string) => number;
  /**
   * Stop the job at its next step — a chunk of a trunk tensor, one matrix (or one stage of it) of an
   * expert, one k-means iteration, a read of a download — its files closed, rejecting with the
   * signal's reason. Nothing is published; the partial work is kept and the same call again resumes
   * it. Between those steps the event loop gets its turn.
   */
  signal?: AbortSignal;
}

export interface ConvertResult {
  out: string;
  plan: ConvertPlan;
  /** True when an earlier, interrupted run's finished units were reused. */
  resumed: boolean;
  /** Source bytes converted by this run (excluding reused units) and the seconds it took. */
  convertedBytes: number;
  seconds: number;
}

/** Room kept free beyond what the container needs: the small files, and the file system's own margin. */
const DISK_MARGIN = 64 << 20;

/**
 * Convert a HuggingFace checkpoint of any family this build runs into a WASTE v0 container: the trunk in Q4G (the
 * embedding and head in Q8G; small tensors in F32), every routed expert in VQ3R with per-layer
 * codebooks, the tokenizer and chat template alongside. The work happens in `OUT.partial/`, unit by
 * unit, and is published by one rename when complete.
 */
export async function convert(src: string, out: string, opts: ConvertOptions = {}): Promise<ConvertResult> {
  const c = await Conversion.open(src, out, opts);
  try {
    await c.writeTrunk();
    await c.convertLayers(c.plan.layers.map((l) => l.layer));
    return c.finish();
  } catch (e) {
    throw c.noSpace(e, 0, 'container needs');
  } finally {
    await c.close();
  }
}

/** What a conversion reads when its input is not a complete checkpoint directory (`waste pull`). */
export interface ConversionInput {
  /** The tensors, their shards opened as they arrive. */
  st: SafetensorsSet;
  /** Disk the input itself still needs on the output's file system, beyond the container. */
  extraBytes: number;
  /** The plan, made before any tensor was moved (its identity names the shards as the hub has them). */
  plan: ConvertPlan;
}

/**
 * One conversion, in units that may run in any order — the trunk, each MoE layer — and then
 * `finish()`, which merges the codebooks, writes the manifest and publishes. `convert` runs them in
 * order on a complete checkpoint; `waste pull` runs each layer as soon as its shards are on disk.
 * The bytes do not depend on the order: each unit's output depends only on its own tensors and the
 * settings (the same property that makes a resumed conversion byte-identical).
 */
export class Conversion {
  private kernels: WasmKernels | undefined;
  private encoder: ExpertEncoder | undefined;
  private done = 0;
  private readonly startDone: number;
  private readonly t0 = performance.now();

  private constructor(
    readonly src: string,
    readonly out: string,
    private readonly opts: ConvertOptions,
    private readonly threads: number,
    private readonly settings: ConvertSettings,
    private readonly raw: JsonObject,
    private readonly arch: ReturnType<typeof architectureOf>,
    private readonly st: SafetensorsSet,
    private readonly w: CheckpointWeights,
    readonly plan: ConvertPlan,
    private readonly job: Job,
  ) {
    const { state } = job;
    const layersDone = new Set(state.layers);
    this.done = (state.trunk ? plan.trunk.reduce((a, t) => a + t.sourceBytes, 0) : 0) + plan.layers.reduce((a, l) => a + (layersDone.has(l.layer) ? l.sourceBytes : 0), 0);
    this.startDone = this.done;
  }

  /** Plan the conversion, check the disk, open (or resume) its partial directory. `input` defaults to the checkpoint in `src`. */
  static async open(src: string, out: string, opts: ConvertOptions = {}, input?: ConversionInput): Promise<Conversion> {
    opts.signal?.throwIfAborted();
    const log = opts.log ?? (() => {});
    const settings = checkSettings({ ...DEFAULT_SETTINGS, ...definedOnly(opts) });
    const threads = opts.threads ?? cpuCount();
    if (!(Number.isInteger(threads) && threads >= 1 && threads <= 256)) throw new WasteError('E_ARG', `threads must be an integer in 1..256 (got ${threads})`);
    src = path.resolve(src);
    out = path.resolve(out);
    if (out === src || src.startsWith(out + path.sep)) throw new WasteError('E_ARG', `the container cannot be written over its own source (${out})`);
    checkOutput(out, opts.force ?? false);

    const { raw, fields } = readCheckpointConfig(src);
    const arch = architectureOf(fields);
    const cfg = arch.parseConfig(fields);
    const st = input?.st ?? SafetensorsSet.open(src);
    try {
      const w = new CheckpointWeights(st, CheckpointWeights.prefixOf(st), arch.stackedExperts);
      // every tensor the model needs, at the shape the config implies, before any work
      arch.planWeights(new CheckpointSource(w), cfg, undefined);
      const plan = input ? input.plan : planConversion(src, w, arch, cfg, settings);
      const job = Job.open(`${out}.partial`, plan.identity, settings, log);
      try {
        const { state } = job;
        const layersDone = new Set(state.layers);
        if (job.resumed) log(`resuming ${job.dir}: trunk ${state.trunk ? 'done' : 'to do'}, ${layersDone.size} of ${plan.layers.length} MoE layers done`);
        const remaining = remainingBytes(plan, state) + (input?.extraBytes ?? 0);
        const free = (opts.freeSpace ?? freeBytes)(job.dir);
        if (free < remaining + DISK_MARGIN)
          throw new WasteError('E_NOSPACE', `not enough disk space in ${path.dirname(job.dir)}: the ${input ? 'download and ' : ''}container need${input ? '' : 's'} ${formatSize(remaining + DISK_MARGIN)} more, ${formatSize(free)} is free`);
        const c = new Conversion(src, out, opts, threads, settings, raw, arch, st, w, plan, job);
        opts.onProgress?.(c.done, plan.sourceBytes, 'starting');
        return c;
      } catch (e) {
        job.unlock();
        throw e;
      }
    } catch (e) {
      if (!input) st.close();
      throw e;
    }
  }

  /**
   * `e` as the user should see it: a write that found the disk full (after the check at the start
   * passed: something else filled it, or the file system's figure was wrong) becomes one line
   * naming the directory and what the job still needs, `extraBytes` (the download's) included.
   * The partial directory is kept — nothing was published — and a rerun with room resumes.
   */
  noSpace(e: unknown, extraBytes: number, what: string): unknown {
    if (!isDiskFull(e)) return e;
    const need = remainingBytes(this.plan, this.job.state) + extraBytes + DISK_MARGIN;
    let free = '';
    try {
      free = `, ${formatSize((this.opts.freeSpace ?? freeBytes)(this.job.dir))} is free now`;
    } catch {
      /* the figure is a courtesy */
    }
    const cause = e instanceof Error ? e.message : String(e);
    return new WasteError(
      'E_NOSPACE',
      `not enough disk space in ${path.dirname(this.job.dir)}: a write failed (${cause}); the ${what} ${formatSize(need)} more${free}. Nothing was published: free some space and run it again, it resumes where it stopped`,
    );
  }

  /** Whether the trunk, or a layer, is converted already (by this run or an earlier one). */
  trunkDone(): boolean {
    return this.job.state.trunk !== null;
  }

  layerDone(layer: number): boolean {
    return this.job.state.layers.includes(layer) || this.job.state.codebooks;
  }

  private tick(what: string): (bytes: number) => void {
    return (bytes) => {
      this.done += bytes;
      this.opts.onProgress?.(this.done, this.plan.sourceBytes, what);
    };
  }

  /** The job's safe point between steps: the event loop's turn, and the signal heard. */
  private readonly pause = () => safePoint(this.opts.signal);

  /** trunk.bin: needs every trunk tensor readable. */
  async writeTrunk(): Promise<void> {
    const { job } = this;
    if (job.state.trunk) return;
    const tmp = path.join(job.dir, 'trunk.bin.tmp');
    const index = await writeTrunk(this.w, this.plan.trunk, tmp, this.tick('trunk'), this.pause);
    rename(tmp, path.join(job.dir, TRUNK));
    job.state.trunk = index;
    job.save();
  }

  /** These MoE layers' banks and codebook parts (those not done): needs their experts readable. */
  async convertLayers(layers: number[]): Promise<void> {
    const { job, plan } = this;
    const todo = plan.layers.filter((l) => layers.includes(l.layer) && !this.layerDone(l.layer));
    if (!todo.length) return;
    if (!this.encoder) {
      const arena = new Arena(0);
      this.kernels = await WasmKernels.create(this.threads, [arena]);
      this.encoder = new ExpertEncoder(this.kernels, arena, this.w, plan.q, plan.layout, this.settings, plan.expertTensor);
    }
    for (const l of todo) {
      const bank = path.join(job.dir, `experts-L${l.layer}.bin`);
      const books = await this.encoder.convertLayer(l, `${bank}.tmp`, this.tick(`layer ${l.layer}`), this.pause);
      writeFileAtomic(partFile(job.dir, l.layer), books);
      rename(`${bank}.tmp`, bank);
      job.state.layers = [...job.state.layers, l.layer].sort((a, b) => a - b);
      job.save();
    }
  }

  /**
   * The codebooks, the small files and the manifest; then the container is published at `out`,
   * with `extra` files (name → text, e.g. the store's record) beside them: all appear at once.
   */
  finish(extra: Record<string, string> = {}): ConvertResult {
    const { job, plan, src, raw, w } = this;
    const { state } = job;
    const dir = job.dir;
    const log = this.opts.log ?? (() => {});
    if (!state.trunk || plan.layers.some((l) => !this.layerDone(l.layer))) throw new Error('Conversion.finish: units are left');
    if (plan.layers.length && !state.codebooks) {
      const parts = plan.layers.map((l) => readFile(partFile(dir, l.layer)));
      writeFileAtomic(path.join(dir, CODEBOOKS), Buffer.concat(parts));
      state.codebooks = true;
      job.save();
    }

    // a tower's settings only for a family that runs one (Qwen3.5's release carries a tower this build does not run)
    const small = [...copyTokenizerFiles(src, dir), ...(this.arch.vision ? visionFiles(src, dir, raw) : [])];
    if (!small.includes('tokenizer.model') && !small.includes('tokenizer.json'))
      log(`note: ${src} has no tiktoken.model, tokenizer.model or tokenizer.json; the container can run token ids but not text`);
    const manifest = {
      format_version: 0,
      // descriptive (readers derive the architecture from the config)
      arch: this.arch.id,
      tensor_prefix: w.prefix,
      config: flattened(raw),
      expert_quant: {
        fmt: plan.q.name,
        stages: plan.q.stages,
        vec_dim: plan.q.vecDim,
        entries: plan.q.entries,
        index_block: plan.q.indexBlock,
        index_bits: plan.q.indexBits,
        bits_per_weight: (plan.q.stages * plan.q.indexBits) / plan.q.vecDim,
      },
      layers: Object.fromEntries(
        plan.layers.map((l) => [String(l.layer), { file: `experts-L${l.layer}.bin`, experts: l.experts, bytes: l.bankBytes, codebook_base: l.codebookBase }]),
      ),
      trunk: state.trunk,
    };
    // the tokenizer and chat files are checksummed too: a valid but altered specials.json would change every prompt
    writeManifest(dir, manifest, [TRUNK, ...(plan.layers.length ? [CODEBOOKS] : []), ...small]);
    const keep = new Set(['manifest.json', STATE_FILE, TRUNK, ...small, ...plan.layers.map((l) => `experts-L${l.layer}.bin`)]);
    if (plan.layers.length) keep.add(CODEBOOKS);
    job.prune(keep);
    for (const [name, text] of Object.entries(extra)) writeFileAtomic(path.join(dir, name), text);
    job.publish(() => publish(dir, this.out));
    return { out: this.out, plan, resumed: job.resumed, convertedBytes: this.done - this.startDone, seconds: (performance.now() - this.t0) / 1000 };
  }

  /** Release the lock, the shards and the kernels (the partial directory stays for a resume). */
  async close(): Promise<void> {
    this.job.unlock();
    this.st.close();
    await this.kernels?.close();
    this.kernels = undefined;
  }
}

/**
 * The manifest's config: a checkpoint's nested `text_config` flattened to the top with the outer
 * part (K3's name, ids, vision and quantization configs) kept under `_outer`, as the C engine's
 * converter writes it; a flat config as it is.
 */
export function flattened(raw: JsonObject): JsonObject {
  const text = raw.text_config;
  if (!text || typeof text !== 'object' || Array.isArray(text)) return raw;
  const { text_config: _, ...outer } = raw;
  return { ...(text as JsonObject), _outer: outer };
}

function definedOnly(o: ConvertOptions): Partial<ConvertSettings> {
  const r: Partial<ConvertSettings> = {};
  for (const k of Object.keys(DEFAULT_SETTINGS) as (keyof ConvertSettings)[]) if (o[k] !== undefined) (r as Record<string, unknown>)[k] = o[k];
  return r;
}

function checkSettings(s: ConvertSettings): ConvertSettings {
  const int = (v: number, lo: number, hi: number, what: string) => {
    if (!(Number.isInteger(v) && v >= lo && v <= hi)) throw new WasteError('E_ARG', `${what} must be an integer in ${lo}..${hi} (got ${v})`);
  };
  if (s.trunkBits !== 4 && s.trunkBits !== 8 && s.trunkBits !== 16) throw new WasteError('E_ARG', `trunk bits must be 4, 8 or 16 (got ${s.trunkBits})`);
  int(s.seed, 0, 2 ** 32 - 1, 'the seed');
  int(s.iters, 0, 1000, 'iterations');
  int(s.cbSample, 1, 65536, 'the codebook sample (experts)');
  int(s.trainVectors, 256, 100_000_000, 'training vectors');
  return s;
}

/** The output must be free (or replaceable with force) before hours of work start. */
function checkOutput(out: string, force: boolean): void {
  if (!fs.existsSync(out)) return;
  let st: fs.Stats;
  try {
    st = fs.statSync(out);
  } catch (e) {
    throw fromSystemError(out, e);
  }
  if (!st.isDirectory()) throw new WasteError('E_ARG', `${out} exists and is not a directory`);
  if (fs.readdirSync(out).length && !force) throw new WasteError('E_ARG', `${out} already exists (use --force to replace it)`);
}

/**
 * Make the finished container visible at `out` in one rename. An old container there (with
 * --force) is moved aside first and removed after: at every moment `out` is either absent, the
 * old container or the new one — never a mixture.
 */
function publish(dir: string, out: string): void {
  let aside: string | undefined;
  try {
    if (fs.existsSync(out) && fs.readdirSync(out).length) {
      aside = `${out}.replaced-${process.pid}`;
      fs.renameSync(out, aside);
    } else if (fs.existsSync(out)) fs.rmdirSync(out);
    fs.renameSync(dir, out);
  } catch (e) {
    if (aside && !fs.existsSync(out)) fs.renameSync(aside, out);
    throw fromSystemError(out, e);
  }
  if (aside) fs.rmSync(aside, { recursive: true, force: true });
}

function partFile(dir: string, layer: number): string {
  return path.join(dir, `codebooks-L${layer}.part`);
}

function rename(from: string, to: string): void {
  try {
    fs.renameSync(from, to);
  } catch (e) {
    throw fromSystemError(to, e);
  }
}

/** One of the job's own part files (its work directory is the user's: a FIFO there is refused, not waited on). */
function readFile(file: string): Buffer {
  return readBytes(file, 1 << 30);
}

/** What the container still needs on disk, from the units this job has finished. */
function remainingBytes(plan: ConvertPlan, state: Job['state']): number {
  const done = new Set(state.layers);
  return (
    (state.trunk ? 0 : plan.trunkBytes) +
    plan.layers.reduce((a, l) => a + (done.has(l.layer) || state.codebooks ? 0 : l.bankBytes + l.booksBytes), 0) +
    (state.codebooks ? 0 : plan.layers.reduce((a, l) => a + l.booksBytes, 0))
  );
}

function freeBytes(dir: string): number {
  const s = fs.statfsSync(dir);
  return s.bavail * s.bsize;
}
