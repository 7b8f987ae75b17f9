import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { readCheckpointConfig } from '../checkpoint/config.js';
import { SafetensorsSet, headerLength } from '../checkpoint/safetensors.js';
import { CheckpointWeights } from '../checkpoint/weights.js';
import { copiedBytes, copyTensors } from '../checkpoint/write.js';
import { type ConvertOptions, Conversion } from '../convert/convert.js';
import { type ConvertPlan, DEFAULT_SETTINGS, planConversion } from '../convert/plan.js';
import { architectureOf } from '../model/registry.js';
import { checkStoreName, downloadsDir, modelsDir, pullLockFile } from '../store/home.js';
import { RECORD_FILE, recordText } from '../store/record.js';
import { safePoint, whenAborted } from '../util/abort.js';
import { WasteError, excerpt, fromSystemError, quoted } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { readBytes, readJson } from '../util/read.js';
import { formatSize } from '../util/size.js';
import { writeFileAtomic } from '../util/write-atomic.js';
import { PidLock } from '../util/pid-lock.js';
import { downloadFile, withRetries } from './download.js';
import { Hub, type HubFile, type HubOptions } from './hub.js';
import { knownModel, knownModels } from './known.js';
import { type ShardUse, schedule } from './schedule.js';
import { DownloadThread } from './download-thread.js';

export interface PullOptions extends Omit<ConvertOptions, 'onProgress'> {
  /** The store name (default: the short name used, else the repository's name). */
  name?: string;
  /** Keep the downloaded checkpoint (in `$WASTE_HOME/downloads/NAME/`): nothing is deleted as it is converted. */
  keepSource?: boolean;
  hub?: HubOptions;
  /**
   * Download the next shard on a thread of its own while the current one's layers convert (default
   * true; the disk's peak allows one shard ahead). false fetches and converts in turn; a custom
   * `hub.fetch` does too (it cannot cross threads).
   */
  overlap?: boolean;
  /** Per-connection stall timeout, attempts and first retry pause (see DownloadOptions). */
  stallMs?: number;
  attempts?: number;
  retryMs?: number;
  /** The whole job's bytes — downloaded plus converted — out of its total; `what` names the step. */
  onProgress?: (done: number, total: number, what: string) => void;
}

/** What a pull will fetch and write, known from the listing and the shards' headers (metadata only). */
export interface PullPlan {
  repo: string;
  revision: string;
  commit: string;
  name: string;
  files: HubFile[];
  downloadBytes: number;
  containerBytes: number;
  trunkSourceBytes: number;
  /** Disk at the peak: streaming conversion (the default) and "download everything, then convert". */
  peakStreaming: number;
  peakFull: number;
  convert: ConvertPlan;
}

export interface PullResult {
  dir: string;
  plan: PullPlan;
  resumed: boolean;
  /** Bytes this run fetched (a resumed run skips what is on disk). */
  fetchedBytes: number;
  seconds: number;
  /** Where the checkpoint was kept (--keep-source). */
  source?: string;
}

/** The files a conversion reads besides the shards (whichever the repository has). */
const SMALL_FILES = new Set([
  'config.json',
  'model.safetensors.index.json',
  'tiktoken.model',
  'tokenizer.model',
  'tokenizer.json',
  'tokenizer_config.json',
  'generation_config.json',
  'preprocessor_config.json',
  'chat_template.jinja',
  'chat_template.json',
]);
const STATE = 'pull.json';
const HEADS = 'headers';

/** `REPO[@REVISION]`, or a short name of a known release (`knownModels()`). */
export function parseSpec(spec: string): { repo: string; revision: string; short?: string } {
  const at = spec.lastIndexOf('@');
  const base = at > 0 ? spec.slice(0, at) : spec;
  const revision = at > 0 ? spec.slice(at + 1) : 'main';
  const known = knownModel(base);
  const repo = known?.repo ?? base;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,95}\/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$/.test(repo))
    throw new WasteError('E_ARG', `${quoted(spec)} is not a repository (OWNER/NAME[@REVISION], each part at most 96 characters) nor a known short name (${knownModels().length} of them, e.g. ${knownModels().slice(0, 3).map((k) => k.short).join(', ')}: \`waste pull --help\` lists them all)`);
  if (!/^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$/.test(revision) || revision.includes('..')) throw new WasteError('E_ARG', `${quoted(revision)} is not a revision`);
  return { repo, revision, short: known && known.short === base ? known.short : undefined };
}

/**
 * The plan of a pull without fetching a weight: the commit, the listing, the index and every
 * shard's header (a few ranged reads each), and the conversion those imply.
 */
export async function planPull(spec: string, opts: PullOptions = {}): Promise<PullPlan> {
  // a dry run writes nothing into the store (a pull would then find a pull to resume there): what
  // it fetches (config, tokenizer, shard headers) goes to a directory of its own, removed after
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'waste-pull-plan-'));
  try {
    const p = await Puller.prepare(spec, opts, scratch);
    p.st.close();
    return p.plan;
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

/** `waste pull`: download a checkpoint and convert it into the store as its shards arrive. */
export async function pull(spec: string, opts: PullOptions = {}): Promise<PullResult> {
  const t0 = performance.now();
  const p = await Puller.prepare(spec, opts);
  try {
    return await p.run(t0);
  } finally {
    p.st.close();
    p.lock?.release();
  }
}

class Puller {
  private fetched = 0;

  private constructor(
    readonly plan: PullPlan,
    readonly st: SafetensorsSet,
    /** The name's lock: one pull into a name at a time (none for a plan, which writes into no store). */
    readonly lock: PidLock | undefined,
    private readonly hub: Hub,
    private readonly dl: string,
    private readonly uses: ShardUse[],
    /** Each shard's trunk tensors (by their full names, sorted): copied out when it arrives. */
    private readonly trunkNames: Map<string, string[]>,
    private readonly opts: PullOptions,
    private readonly resumed: boolean,
  ) {}

  /** The plan of a pull; `scratch`: a plan only, its downloads there rather than in the store, and no lock taken. */
  static async prepare(spec: string, opts: PullOptions, scratch?: string): Promise<Puller> {
    const { repo, revision, short } = parseSpec(spec);
    const name = checkStoreName(opts.name ?? short ?? repo.split('/')[1]);
    const out = path.join(modelsDir(), name);
    if (fs.existsSync(path.join(out, 'manifest.json')) && !opts.force) throw new WasteError('E_ARG', `${name} is in the store already (${out}); \`waste rm ${name}\` first, or pass --force to replace it`);
    opts.signal?.throwIfAborted();
    const hub = new Hub(opts.hub, opts.signal);
    const dl = scratch ?? path.join(downloadsDir(), name);
    const lock = scratch === undefined ? lockName(name) : undefined;
    try {
      return await Puller.plan(repo, revision, name, hub, dl, lock, opts);
    } catch (e) {
      lock?.release();
      throw e;
    }
  }

  private static async plan(repo: string, revision: string, name: string, hub: Hub, dl: string, lock: PidLock | undefined, opts: PullOptions): Promise<Puller> {
    const log = opts.log ?? (() => {});
    // a pull resumed reads the commit it started from, whatever the branch points to now
    const prev = readState(dl);
    let commit: string;
    let resumed = false;
    if (prev && prev.repo === repo && prev.revision === revision) {
      commit = prev.commit;
      resumed = true;
      log(`resuming the pull of ${repo}@${revision} (commit ${commit.slice(0, 12)}) in ${dl}`);
    } else {
      commit = /^[0-9a-f]{40}$/.test(revision) ? revision : await withRetries(repo, () => hub.commitOf(repo, revision), retryOpts(opts));
      if (prev) {
        log(`${dl} holds a pull of ${prev.repo}@${prev.revision}; starting over`);
        fs.rmSync(dl, { recursive: true, force: true });
      }
    }
    try {
      fs.mkdirSync(path.join(dl, HEADS), { recursive: true });
    } catch (e) {
      throw fromSystemError(dl, e);
    }
    writeFileAtomic(path.join(dl, STATE), JSON.stringify({ repo, revision, commit }) + '\n');

    const listing = await withRetries(repo, () => hub.list(repo, commit), retryOpts(opts));
    const byPath = new Map(listing.map((f) => [f.path, f]));
    if (!byPath.has('config.json')) throw new WasteError('E_FORMAT', `${repo}@${revision} has no config.json; is it a HuggingFace model checkpoint?`);
    const small = listing.filter((f) => SMALL_FILES.has(f.path));
    for (const f of small) await fetchTo(hub, repo, commit, f, dl, opts);

    // the shards: those the index names, else the single model.safetensors
    let weightMap: Record<string, string> | null = null;
    let shardNames: string[];
    if (byPath.has('model.safetensors.index.json')) {
      const doc = readJson(path.join(dl, 'model.safetensors.index.json'));
      const map = isObject(doc) ? doc.weight_map : undefined;
      if (!isObject(map)) throw new WasteError('E_FORMAT', `${repo}: model.safetensors.index.json has no weight_map object`);
      weightMap = {};
      for (const [t, f] of Object.entries(map)) {
        if (typeof f !== 'string' || !/^[A-Za-z0-9._-]+\.safetensors$/.test(f) || !byPath.has(f))
          throw new WasteError('E_FORMAT', `${repo}: model.safetensors.index.json maps ${excerpt(t)} to ${excerpt(String(JSON.stringify(f)))}, which is not a shard of the repository`);
        weightMap[t] = f;
      }
      shardNames = [...new Set(Object.values(weightMap))].sort();
    } else if (byPath.has('model.safetensors')) shardNames = ['model.safetensors'];
    else throw new WasteError('E_FORMAT', `${repo}@${revision} has no model.safetensors and no model.safetensors.index.json`);
    const shards = shardNames.map((s) => byPath.get(s)!);

    // every shard's header, kept on disk: a shard deleted once converted still has its tensors' places
    const headers = new Map<string, { size: number; head: Uint8Array }>();
    for (const s of shards) headers.set(s.path, { size: s.size, head: await withRetries(s.path, () => headerOf(hub, repo, commit, s, dl), retryOpts(opts)) });
    const st = SafetensorsSet.fromHeaders(dl, weightMap, headers);
    try {
      const { fields } = readCheckpointConfig(dl);
      const arch = architectureOf(fields);
      const cfg = arch.parseConfig(fields);
      const w = new CheckpointWeights(st, CheckpointWeights.prefixOf(st), arch.stackedExperts);
      const settings = { ...DEFAULT_SETTINGS };
      for (const k of Object.keys(DEFAULT_SETTINGS) as (keyof typeof settings)[]) if (opts[k] !== undefined) (settings as Record<string, unknown>)[k] = opts[k];
      const convert = planConversion(dl, w, arch, cfg, settings, stampOf(shards));
      // the trunk tensors an earlier run copied out of shards since deleted are read from the copies
      // (after planning: the resume identity names the shards, not where their tensors are now)
      for (const s of shards) {
        const copy = stagedFile(dl, s.path);
        if (fs.existsSync(copy)) st.repoint(copy);
      }

      const trunkNames = new Map<string, string[]>();
      const uses: ShardUse[] = shards.map((s) => {
        const layers = new Set<number>();
        const names: string[] = [];
        trunkNames.set(s.path, names);
        for (const t of st.names()) {
          if (!originalFile(weightMap, t, s.path)) continue;
          // MTP layers: neither converted nor copied aside
          if (arch.unread?.(t, cfg)) continue;
          const layer = arch.expertLayerOf(t);
          if (layer !== undefined) layers.add(layer);
          else names.push(t);
        }
        names.sort();
        // the copy's size, its header included: what the disk check counts
        return { file: s.path, bytes: s.size, trunkBytes: names.length ? copiedBytes(st, names) : 0, layers: [...layers] };
      });
      const sched = schedule(uses, opts.overlap === false || hub.portable() === undefined ? 0 : 1);
      const downloadBytes = small.reduce((a, f) => a + f.size, 0) + shards.reduce((a, f) => a + f.size, 0);
      const trunkSourceBytes = uses.reduce((a, u) => a + u.trunkBytes, 0);
      const plan: PullPlan = {
        repo,
        revision,
        commit,
        name,
        files: [...small, ...shards],
        downloadBytes,
        containerBytes: convert.totalBytes,
        trunkSourceBytes,
        peakStreaming: convert.totalBytes + sched.peakSourceBytes,
        peakFull: convert.totalBytes + downloadBytes,
        convert,
      };
      return new Puller(plan, st, lock, hub, dl, uses, trunkNames, opts, resumed);
    } catch (e) {
      st.close();
      throw e;
    }
  }

  /** The hub as the download thread reaches it, when downloads overlap the conversion (the default). */
  private overlapped(): { endpoint: string; token?: string } | undefined {
    return this.opts.overlap === false ? undefined : this.hub.portable();
  }

  async run(t0: number): Promise<PullResult> {
    const { plan, st, dl, uses, opts } = this;
    const log = opts.log ?? (() => {});
    const keep = opts.keepSource ?? false;
    const out = path.join(modelsDir(), plan.name);
    fs.mkdirSync(modelsDir(), { recursive: true });
    const ahead = this.overlapped();
    const sched = schedule(uses, ahead ? 1 : 0);
    const onDisk = (f: string) => fs.existsSync(path.join(dl, f));
    // the disk the download still needs beside the container: its peak, less what is on disk already
    const need = () => {
      const present = uses.filter((u) => onDisk(u.file)).reduce((a, u) => a + u.bytes, 0);
      const staged = uses.filter((u) => fs.existsSync(stagedFile(dl, u.file))).reduce((a, u) => a + u.trunkBytes, 0);
      return Math.max(0, (keep ? plan.downloadBytes : sched.peakSourceBytes) - present - staged);
    };

    const shardTotal = uses.reduce((a, u) => a + u.bytes, 0);
    const total = shardTotal + plan.convert.sourceBytes;
    // bytes fetched by earlier runs and by this one in-thread, then by the download thread
    let got = 0;
    let converted = 0;
    let thread: DownloadThread | undefined;
    // shard i's download: on the thread while shard i - 1's layers convert, or here, in turn
    const fetching: (Promise<void> | undefined)[] = [];
    const progress = (what: string) => opts.onProgress?.(got + (thread?.arrived ?? 0) + converted, total, what);
    const conv = await Conversion.open(dl, out, { ...opts, onProgress: (d, _t, what) => ((converted = d), progress(what)) }, { st, extraBytes: need(), plan: plan.convert });
    // what the download thread cannot hear: a wait for its shard ends at once when the pull is stopped
    const stop = whenAborted(opts.signal);
    try {
      if (ahead) thread = new DownloadThread({ ...ahead, stallMs: opts.stallMs, attempts: opts.attempts, retryMs: opts.retryMs }, (f) => progress(`fetching ${f}`), log);
      // (a kept checkpoint stages no trunk copies: a shard holding trunk tensors is read from itself at the end)
      const spent = (u: ShardUse) => (u.trunkBytes === 0 || fs.existsSync(stagedFile(dl, u.file))) && u.layers.every((l) => conv.layerDone(l));
      // what an earlier run fetched counts as done: the shards on disk and those converted and deleted
      got = uses.filter((u) => onDisk(u.file) || spent(u)).reduce((a, u) => a + u.bytes, 0);
      const start = (i: number) => {
        const u = uses[i];
        if (!u || fetching[i]) return;
        const file = path.join(dl, u.file);
        if (onDisk(u.file) || spent(u)) return void (fetching[i] = Promise.resolve());
        const f = plan.files.find((x) => x.path === u.file)!;
        got += partBytes(file);
        fetching[i] = thread
          ? thread.fetch(plan.repo, plan.commit, f, file)
          : downloadFile(this.hub, plan.repo, plan.commit, f, file, {
              onBytes: (n) => {
                got += n;
                this.fetched += Math.max(0, n);
                progress(`fetching ${u.file}`);
              },
              stallMs: opts.stallMs,
              attempts: opts.attempts,
              retryMs: opts.retryMs,
              log,
              signal: opts.signal,
            });
        // awaited in turn; a failure while an earlier layer converts is not unhandled meanwhile
        fetching[i].catch(() => {});
      };
      for (let i = 0; i < uses.length; i++) {
        const u = uses[i];
        start(i);
        await Promise.race([fetching[i], stop.aborted]);
        await safePoint(opts.signal);
        // the next shard downloads while this one's layers convert: one shard ahead, as the schedule's peak allows
        if (thread) start(i + 1);
        if (!keep && u.trunkBytes && !fs.existsSync(stagedFile(dl, u.file))) {
          copyTensors(st, this.trunkNames.get(u.file)!, stagedFile(dl, u.file));
          st.repoint(stagedFile(dl, u.file));
        }
        await conv.convertLayers(sched.ready.get(u.file)!);
        if (!keep)
          for (const f of sched.spentAfter.get(u.file)!) {
            st.release(path.join(dl, f));
            fs.rmSync(path.join(dl, f), { force: true });
          }
      }
      await conv.writeTrunk();
      const r = conv.finish({ [RECORD_FILE]: recordText({ repo: plan.repo, revision: plan.revision, commit: plan.commit, pulled: new Date().toISOString() }) });
      if (!keep) fs.rmSync(dl, { recursive: true, force: true });
      else log(`the checkpoint is kept in ${dl}`);
      return { dir: r.out, plan, resumed: this.resumed || r.resumed, fetchedBytes: this.fetched + (thread?.fetched ?? 0), seconds: (performance.now() - t0) / 1000, ...(keep ? { source: dl } : {}) };
    } catch (e) {
      throw conv.noSpace(e, need(), 'download and container need');
    } finally {
      stop.done();
      await thread?.close();
      // a download stopped by the signal has closed its file before the pull returns
      await Promise.allSettled(fetching);
      await conv.close();
    }
  }
}

function lockName(name: string): PidLock {
  try {
    fs.mkdirSync(downloadsDir(), { recursive: true });
  } catch (e) {
    throw fromSystemError(downloadsDir(), e);
  }
  // one pull into a name at a time: two would write the same downloads and partial container; the
  // lock sits beside downloads/NAME (a pull that starts over deletes that directory)
  return PidLock.take(pullLockFile(name), (pid) =>
    pid === process.pid ? `another pull into ${name} is running in this process` : `another pull into ${name} is running (process ${pid}); wait for it or stop it`,
  );
}

function retryOpts(o: PullOptions) {
  return { attempts: o.attempts, retryMs: o.retryMs, log: o.log, signal: o.signal };
}

function partBytes(file: string): number {
  try {
    return fs.statSync(`${file}.part`).size;
  } catch {
    return 0;
  }
}

function stagedFile(dl: string, shard: string): string {
  return path.join(dl, `trunk-of-${shard}`);
}

function originalFile(weightMap: Record<string, string> | null, tensor: string, shard: string): boolean {
  return weightMap ? weightMap[tensor] === shard : true;
}

/** A shard is what its hub hash says (the file itself is gone once converted). */
function stampOf(files: HubFile[]): (file: string) => string {
  const m = new Map(files.map((f) => [f.path, `${f.size} ${f.sha256 ?? f.gitOid ?? ''}`]));
  return (file) => {
    const base = path.basename(file);
    return m.get(base) ?? m.get(base.replace(/^trunk-of-/, '')) ?? base;
  };
}

async function fetchTo(hub: Hub, repo: string, commit: string, f: HubFile, dl: string, opts: PullOptions): Promise<void> {
  const dest = path.join(dl, f.path);
  if (fs.existsSync(dest)) return;
  if (f.size > 256 << 20) throw new WasteError('E_FORMAT', `${repo}: ${f.path} is ${formatSize(f.size)}, too large for what it is`);
  await downloadFile(hub, repo, commit, f, dest, { stallMs: opts.stallMs, attempts: opts.attempts, retryMs: opts.retryMs, log: opts.log, signal: opts.signal });
}

/** A shard's first 8 + n bytes: from disk when it is there, else two ranged reads; kept in headers/. */
async function headerOf(hub: Hub, repo: string, commit: string, s: HubFile, dl: string): Promise<Uint8Array> {
  const kept = path.join(dl, HEADS, `${s.path}.head`);
  if (fs.existsSync(kept)) return readBytes(kept, (256 << 20) + 8);
  let head: Uint8Array;
  const local = path.join(dl, s.path);
  if (fs.existsSync(local)) {
    const fd = fs.openSync(local, 'r');
    try {
      const first = Buffer.alloc(8);
      fs.readSync(fd, first, 0, 8, 0);
      const n = headerLength(first, s.path);
      head = Buffer.alloc(8 + n);
      fs.readSync(fd, head, 0, 8 + n, 0);
    } finally {
      fs.closeSync(fd);
    }
  } else {
    const blob = await hub.blob(repo, commit, s.path);
    if (blob.size < 8) throw new WasteError('E_FORMAT', `${s.path}: ${blob.size} bytes is too short for a safetensors file`);
    const first = new Uint8Array(await blob.slice(0, 8).arrayBuffer());
    const n = headerLength(first, s.path);
    if (8 + n > s.size) throw new WasteError('E_FORMAT', `${s.path}: header length ${n} does not fit the file (${s.size} bytes)`);
    const rest = new Uint8Array(await blob.slice(8, 8 + n).arrayBuffer());
    if (rest.length !== n) throw new WasteError('E_IO', `${s.path}: the hub sent ${rest.length} of the header's ${n} bytes`);
    head = Buffer.concat([first, rest]);
  }
  writeFileAtomic(kept, head);
  return head;
}

function readState(dl: string): { repo: string; revision: string; commit: string } | undefined {
  try {
    const s = readJson(path.join(dl, STATE));
    if (isObject(s) && typeof s.repo === 'string' && typeof s.revision === 'string' && typeof s.commit === 'string' && /^[0-9a-f]{40}$/.test(s.commit))
      return { repo: s.repo, revision: s.revision, commit: s.commit };
  } catch {
    /* no state */
  }
  return undefined;
}
