import { type StreamBenchOptions, type StreamBenchResult, benchStream } from './stream.js';
import { median } from './measure.js';

export interface LookaheadBenchOptions extends StreamBenchOptions {
  /** Lookahead depths to compare (default 0, 1, 2). */
  depths?: number[];
  /** Rounds of every depth in turn (default 3): speed is compared as medians of interleaved runs. */
  rounds?: number;
}

export interface LookaheadArm {
  depth: number;
  /** Medians over the rounds. */
  decode_tok_s: number;
  read_wait_s: number;
  hit_rate: number;
  bytes_per_token: number;
  speculative_reads: number;
  speculative_used: number;
  speculative_wasted_bytes: number;
  /** Median decode speed ÷ that of depth 1 (the engine's lookahead before depths were a choice). */
  speed_vs_depth1: number | null;
  /** Guess quality per depth, from the last round (the router's guesses do not depend on the cache). */
  by_depth: StreamBenchResult['lookahead_by_depth'];
  runs: StreamBenchResult[];
}

export interface LookaheadBenchResult {
  model: string;
  tokens: number;
  rounds: number;
  cache_slots: number;
  budget_bytes: number;
  arms: LookaheadArm[];
}


/**
 * Decode streamed under one budget with each lookahead depth in turn, A B C A B C …, the model
 * opened cold (no hotlist) for every run so each starts from the same empty cache.
 */
export async function benchLookahead(dir: string, opts: LookaheadBenchOptions = {}): Promise<LookaheadBenchResult> {
  const { depths = [0, 1, 2], rounds = 3, log = () => {}, ...rest } = opts;
  const runs = new Map<number, StreamBenchResult[]>(depths.map((d) => [d, []]));
  for (let r = 0; r < rounds; r++)
    for (const depth of depths) {
      log(`round ${r + 1}/${rounds}, lookahead ${depth} layer${depth === 1 ? '' : 's'} ahead…`);
      const res = await benchStream(dir, { ...rest, warm: false, lookaheadLayers: depth });
      runs.get(depth)!.push(res);
    }
  const arms: LookaheadArm[] = depths.map((depth) => {
    const rs = runs.get(depth)!;
    const m = (f: (x: StreamBenchResult) => number) => median(rs.map(f));
    return {
      depth,
      decode_tok_s: m((x) => x.decode_tok_s),
      read_wait_s: m((x) => x.read_wait_s),
      hit_rate: m((x) => x.hit_rate),
      bytes_per_token: m((x) => x.bytes_per_token),
      speculative_reads: m((x) => x.speculative_reads),
      speculative_used: m((x) => x.speculative_used),
      speculative_wasted_bytes: m((x) => x.speculative_wasted_bytes),
      speed_vs_depth1: null,
      by_depth: rs[rs.length - 1].lookahead_by_depth,
      runs: rs,
    };
  });
  const one = arms.find((a) => a.depth === 1);
  if (one) for (const a of arms) a.speed_vs_depth1 = a.decode_tok_s / one.decode_tok_s;
  const first = runs.get(depths[0])![0];
  return { model: dir, tokens: first.tokens, rounds, cache_slots: first.cache_slots, budget_bytes: first.budget_bytes, arms };
}

export function renderLookaheadBench(r: LookaheadBenchResult): string {
  const pct = (x: number | null) => (x === null ? '  n/a' : `${(100 * x).toFixed(1)}%`);
  const lines = [`${r.model}: ${r.tokens} tokens decoded per run, ${r.rounds} interleaved rounds, ${r.cache_slots} cache slots (budget ${(r.budget_bytes / 1e9).toFixed(2)} GB); medians`];
  lines.push('depth  tok/s   ×depth1  wait s  hits    MB/token  spec reads  used   wasted MB  guesses');
  for (const a of r.arms)
    lines.push(
      [
        String(a.depth).padStart(5),
        a.decode_tok_s.toFixed(3).padStart(7),
        (a.speed_vs_depth1 === null ? 'n/a' : a.speed_vs_depth1.toFixed(3)).padStart(8),
        a.read_wait_s.toFixed(2).padStart(7),
        pct(a.hit_rate).padStart(6),
        (a.bytes_per_token / 1e6).toFixed(1).padStart(9),
        String(a.speculative_reads).padStart(11),
        String(a.speculative_used).padStart(6),
        (a.speculative_wasted_bytes / 1e6).toFixed(0).padStart(10),
        ' ' + (a.by_depth.map((d) => `L+${d.depth} p ${pct(d.precision)} r ${pct(d.recall)}`).join(', ') || '-'),
      ].join(' '),
    );
  return lines.join('\n') + '\n';
}
