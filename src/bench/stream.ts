import * as fs from 'node:fs';
import { Model, type OpenOptions } from '../api/model.js';
import { Arena } from '../memory/arena.js';
import { ReaderPool, Status } from '../experts/readers.js';
import { WasteError } from '../util/errors.js';
import type { CacheResize } from '../engine/elastic-cache.js';

export interface StreamBenchOptions extends OpenOptions {
  tokens?: number;
  promptTokens?: number;
  /** A routing trace (JSONL, one {"layers": [[ids…] per MoE layer]} per token) to replay. */
  routingTrace?: string;
  /**
   * What to feed while decoding: 'random' (default) a fixed pseudo-random token sequence, so
   * synthetic weights route as widely as a real model does; 'greedy' each step's most likely token.
   */
  inputs?: 'random' | 'greedy';
  log?: (s: string) => void;
}

export interface StreamBenchResult {
  model: string;
  tokens: number;
  prompt_tokens: number;
  decode_tok_s: number;
  prefill_tok_s: number;
  /** Expert records the prefill read, and their bytes (one read per distinct expert per chunk). */
  prefill_reads: number;
  prefill_bytes: number;
  /** Prefill tokens run together (--chunk). */
  chunk: number;
  /** Decode speed if the same records were read back to back at the disk's raw speed. */
  floor_tok_s: number;
  floor_read_bytes_s: number;
  hit_rate: number;
  bytes_per_token: number;
  read_wait_s: number;
  lookahead: number;
  lookahead_layers: number;
  lookahead_precision: number | null;
  /** Per depth (1: one layer ahead): of the experts guessed, the share then asked for; of those asked for, the share guessed. */
  lookahead_by_depth: { depth: number; precision: number | null; recall: number | null }[];
  speculative_reads: number;
  speculative_used: number;
  /** Bytes of lookahead reads no demand used while they were cached. */
  speculative_wasted_bytes: number;
  peak_rss_bytes: number;
  baseline_rss_bytes: number;
  budget_bytes: number;
  floor_bytes: number;
  allocated_bytes: number;
  cache_slots: number;
  /** The expert cache's arenas at the end, what the elastic cache grows back to, and the resizes it made (none under an explicit budget). */
  cache_bytes: number;
  cache_max_bytes: number;
  elastic: boolean;
  resizes: CacheResize[];
  /** Major page faults of this process during the decode (from /proc/self/stat): what paging would show. */
  major_faults: number;
  /** Records loaded at open from the container's learned hotlist (0: a cold cache). */
  warmed: number;
  threads: number;
  io_threads: number;
  odirect: boolean;
  odirect_note?: string;
  routing_trace: string | null;
  note: string;
}

/** Peak resident set of this process (VmHWM on Linux), else the current one. */
export function peakRss(): number {
  try {
    const m = /VmHWM:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    if (m) return Number(m[1]) * 1024;
  } catch {
    /* not Linux */
  }
  return process.memoryUsage().rss;
}

/** Major page faults of this process so far (field 12 of /proc/self/stat; 0 where there is none). */
export function majorFaults(): number {
  try {
    const stat = fs.readFileSync('/proc/self/stat', 'utf8');
    // the fields after the command name, which is in parentheses and may hold spaces
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[9]) || 0;
  } catch {
    return 0;
  }
}

/** A routing trace: per token, per MoE layer, the selected expert ids. */
export function readTrace(file: string): number[][][] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new WasteError('E_IO', `${file}: ${(e as Error).message}`);
  }
  const out: number[][][] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let rec: unknown;
    try {
      rec = JSON.parse(line);
    } catch {
      throw new WasteError('E_FORMAT', `${file}: line ${i + 1} is not JSON`);
    }
    const layers = (rec as { layers?: unknown }).layers;
    if (!Array.isArray(layers) || !layers.every((l) => Array.isArray(l) && l.every((x) => Number.isInteger(x) && x >= 0)))
      throw new WasteError('E_FORMAT', `${file}: line ${i + 1} has no "layers" list of expert-id lists`);
    out.push(layers as number[][]);
  });
  if (!out.length) throw new WasteError('E_FORMAT', `${file}: no tokens`);
  return out;
}

/**
 * Decode and prefill speed of a container with its experts streamed from disk under a budget,
 * next to the I/O floor measured in the same run: the same records read raw, with O_DIRECT where
 * the banks have it, at the same concurrency.
 */
export async function benchStream(dir: string, opts: StreamBenchOptions = {}): Promise<StreamBenchResult> {
  const log = opts.log ?? (() => {});
  const tokens = opts.tokens ?? 32;
  const promptTokens = opts.promptTokens ?? 16;
  const baseline = process.memoryUsage().rss;
  const trace = opts.routingTrace ? readTrace(opts.routingTrace) : undefined;
  const { tokens: _t, promptTokens: _p, routingTrace: _r, inputs: _i, log: _l, ...open } = opts;
  // a bench measures a cold cache unless told: run, chat and serve now leave a learned hotlist behind
  const m = await Model.open(dir, { ...open, warm: open.warm ?? false, maxContext: Math.max(opts.maxContext ?? 0, promptTokens + tokens + 1) });
  try {
    const cfg = m.config;
    const moeLayers = cfg.layerKinds.flatMap((k, i) => (k.ffn === 'moe' ? [i] : []));
    let step = 0;
    if (trace)
      m.setRouteOverride((L) => {
        const row = trace[step % trace.length][moeLayers.indexOf(L)];
        if (!row) return undefined;
        // map the recorded ids onto this container's experts, keeping them distinct
        const ids: number[] = [];
        for (const e of row) {
          let x = e % cfg.moe.experts;
          while (ids.includes(x)) x = (x + 1) % cfg.moe.experts;
          ids.push(x);
        }
        return ids;
      });
    const s = m.newSession();
    const prompt = Array.from({ length: promptTokens }, (_, i) => (i * 7919 + 13) % cfg.vocab);
    log(`prefill of ${promptTokens} tokens…`);
    const pre = m.stats();
    const t0 = performance.now();
    let logits = await s.forward(prompt);
    const prefillS = (performance.now() - t0) / 1000;
    const before = m.stats();
    const logStart = m.cache ? m.cache.readLog.length : 0;
    const faults0 = majorFaults();
    log(`decoding ${tokens} tokens…`);
    const t1 = performance.now();
    for (let i = 0; i < tokens; i++) {
      step = i + 1;
      let next = ((i + 1) * 2654435761 + 97) % cfg.vocab;
      if (opts.inputs === 'greedy') {
        next = 0;
        for (let v = 1; v < logits.length; v++) if (logits[v] > logits[next]) next = v;
      }
      logits = await s.forward([next]);
    }
    const decodeS = (performance.now() - t1) / 1000;
    const after = m.stats();
    const faults = majorFaults() - faults0;
    const peak = peakRss();

    // The I/O floor: the records this decode read, read again raw, in order, at the same concurrency.
    const reads = m.cache ? m.cache.readLog.slice(logStart) : [];
    const floorS = reads.length ? await rawReadSeconds(m, reads, Math.max(1, opts.ioThreads ?? 2)) : 0;
    const bytes = reads.length * (m.cache?.stride ?? 0);
    const demand = after.hits + after.misses - (before.hits + before.misses);
    const predicted = after.lookaheadPredicted - before.lookaheadPredicted;
    return {
      model: dir,
      tokens,
      prompt_tokens: promptTokens,
      decode_tok_s: tokens / decodeS,
      prefill_tok_s: promptTokens / prefillS,
      prefill_reads: before.misses - pre.misses,
      prefill_bytes: before.bytesRead - pre.bytesRead,
      chunk: m.net.chunk,
      floor_tok_s: floorS > 0 ? tokens / floorS : Infinity,
      floor_read_bytes_s: floorS > 0 ? bytes / floorS : 0,
      hit_rate: demand ? (after.hits - before.hits) / demand : 0,
      bytes_per_token: bytes / tokens,
      read_wait_s: after.readWaitSeconds - before.readWaitSeconds,
      lookahead: after.lookahead,
      lookahead_layers: after.lookaheadLayers,
      lookahead_precision: predicted ? (after.lookaheadCorrect - before.lookaheadCorrect) / predicted : null,
      lookahead_by_depth: after.lookaheadByDepth.map((d, i) => {
        const b = before.lookaheadByDepth[i] ?? { predicted: 0, correct: 0, asked: 0 };
        const p = d.predicted - b.predicted;
        const a = d.asked - b.asked;
        return { depth: i + 1, precision: p ? (d.correct - b.correct) / p : null, recall: a ? (d.correct - b.correct) / a : null };
      }),
      speculative_reads: after.speculativeReads - before.speculativeReads,
      speculative_used: after.speculativeUsed - before.speculativeUsed,
      speculative_wasted_bytes: after.speculativeBytes - before.speculativeBytes - (after.speculativeUsed - before.speculativeUsed) * (m.cache?.stride ?? 0),
      peak_rss_bytes: peak,
      baseline_rss_bytes: baseline,
      budget_bytes: after.budgetBytes,
      floor_bytes: after.floorBytes,
      allocated_bytes: after.allocatedBytes,
      cache_slots: after.slots,
      cache_bytes: after.cacheBytes,
      cache_max_bytes: after.cacheMaxBytes,
      elastic: m.elastic !== undefined,
      resizes: after.resizes,
      major_faults: faults,
      warmed: m.stats().warmed,
      threads: m.threads,
      io_threads: opts.ioThreads ?? 2,
      odirect: after.direct,
      odirect_note: after.directNote,
      routing_trace: opts.routingTrace ?? null,
      note: trace
        ? 'routing replayed from a trace: timing only, the generated tokens are meaningless'
        : opts.inputs === 'greedy'
          ? 'greedy decode from a fixed prompt'
          : 'decode of a fixed pseudo-random token sequence (timing only)',
    };
  } finally {
    await m.close();
  }
}

/** Read the given (layer·65536 + expert) records raw, in order, `threads` at a time. */
async function rawReadSeconds(m: Model, keys: number[], threads: number): Promise<number> {
  const stride = m.cache!.stride;
  const depth = Math.max(2, threads * 2);
  const arena = new Arena(depth * stride + 4096);
  const base = arena.alloc(depth * stride, 4096);
  const pool = await ReaderPool.create(threads, depth, [arena], 0);
  const fds = (m.cache as unknown as { files: { fds: Map<number, number> } }).files.fds;
  try {
    const t0 = performance.now();
    let next = 0;
    const busy = new Array<boolean>(depth).fill(false);
    let inFlight = 0;
    let done = Atomics.load(pool.ctrl, 2);
    while (next < keys.length || inFlight > 0) {
      for (let slot = 0; slot < depth && next < keys.length; slot++) {
        if (busy[slot]) continue;
        const layer = Math.floor(keys[next] / 65536);
        const expert = keys[next] % 65536;
        const bank = m.container!.banks.get(layer)!;
        pool.enqueue(slot, fds.get(layer)!, expert * bank.stride, arena.id, base + slot * stride, bank.stride);
        busy[slot] = true;
        inFlight++;
        next++;
      }
      Atomics.wait(pool.ctrl, 2, done, 1000);
      done = Atomics.load(pool.ctrl, 2);
      for (let slot = 0; slot < depth; slot++) {
        const st = Atomics.load(pool.status, slot);
        if (busy[slot] && st !== Status.QUEUED) {
          if (st !== Status.READY) throw new WasteError('E_IO', `the I/O floor measurement could not read a record (status ${st}, errno ${pool.errno[slot]})`);
          busy[slot] = false;
          inFlight--;
        }
      }
    }
    return (performance.now() - t0) / 1000;
  } finally {
    await pool.close();
  }
}

export function renderStream(r: StreamBenchResult): string {
  const gb = (n: number) => `${(n / 1e9).toFixed(2)} GB`;
  const pct = (x: number | null) => (x === null ? 'n/a' : `${(100 * x).toFixed(1)}%`);
  return [
    `model ${r.model} (${r.note})`,
    `budget ${gb(r.budget_bytes)} (floor ${gb(r.floor_bytes)}), ${r.cache_slots} cache slots, ${r.threads} threads, ${r.io_threads} I/O threads, O_DIRECT ${r.odirect ? 'on' : `off${r.odirect_note ? ` (${r.odirect_note})` : ''}`}`,
    `prefill ${r.prefill_tok_s.toFixed(2)} tok/s (${r.prompt_tokens} tokens, chunks of ${r.chunk}: ${r.prefill_reads} expert reads, ${gb(r.prefill_bytes)})`,
    `decode  ${r.decode_tok_s.toFixed(3)} tok/s over ${r.tokens} tokens; I/O floor ${r.floor_tok_s.toFixed(3)} tok/s (${(r.floor_read_bytes_s / 1e9).toFixed(2)} GB/s raw) → ${(r.decode_tok_s / r.floor_tok_s).toFixed(2)} of the floor`,
    `hit rate ${(100 * r.hit_rate).toFixed(1)}%, ${(r.bytes_per_token / 1e6).toFixed(1)} MB read per token, ${r.read_wait_s.toFixed(2)} s waiting on reads`,
    `lookahead ${r.lookahead} experts × ${r.lookahead_layers} layers: ${r.speculative_reads} reads, ${r.speculative_used} used, ${gb(r.speculative_wasted_bytes)} wasted; guesses ${r.lookahead_by_depth.map((d) => `L+${d.depth} precision ${pct(d.precision)} recall ${pct(d.recall)}`).join(', ') || 'none'}`,
    `${r.warmed ? `warm start: ${r.warmed} records from usage.waste` : 'cold start (no learned hotlist loaded)'}`,
    `RSS peak ${gb(r.peak_rss_bytes)}, baseline ${gb(r.baseline_rss_bytes)} (engine allocated ${gb(r.allocated_bytes)}); ${r.major_faults} major page faults while decoding`,
    r.elastic
      ? `elastic cache ${gb(r.cache_bytes)} of ${gb(r.cache_max_bytes)}, ${r.resizes.length} resize${r.resizes.length === 1 ? '' : 's'}${r.resizes.length ? ':' : ''}`
      : `fixed cache (explicit budget or cache slots) ${gb(r.cache_bytes)}`,
    ...r.resizes.map((z) => `  ${z.at} ${gb(z.fromBytes)} → ${gb(z.toBytes)} (${z.fromSlots} → ${z.toSlots} slots): ${z.why}`),
    '',
  ].join('\n');
}
