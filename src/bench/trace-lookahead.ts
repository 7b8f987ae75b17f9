import { readTrace } from './stream.js';

export interface TraceLookaheadRow {
  depth: number;
  /** Guesses from what layer L chose, by co-occurrence counts learned online. */
  cooccurrence: number;
  /** Guesses: layer L+d's most requested experts so far. */
  frequency: number;
  /** Guesses: what layer L+d chose for the previous token. */
  previous: number;
}

export interface TraceLookaheadResult {
  trace: string;
  tokens: number;
  layers: number;
  guesses: number;
  /** Tokens before scoring starts (the counts are learned from the trace itself). */
  warmup: number;
  /** Precision = recall here (guesses and choices are both `guesses` experts). */
  rows: TraceLookaheadRow[];
}

/**
 * How much a real model's routing at layer L tells about layers L+1, L+2, L+3 — the only
 * lookahead signal a routing trace holds (it has no hidden states to apply routers to). For each
 * token after a warm-up and each layer pair, `guesses` experts of L+d are guessed three ways from
 * the tokens before it and scored against what L+d chose.
 */
export function traceLookahead(file: string, opts: { guesses?: number; warmup?: number; depths?: number } = {}): TraceLookaheadResult {
  const trace = readTrace(file);
  const layers = trace[0].length;
  const K = opts.guesses ?? trace[0][0].length;
  const warmup = opts.warmup ?? 50;
  const depths = opts.depths ?? 3;
  let E = 0;
  for (const tok of trace) for (const l of tok) for (const e of l) E = Math.max(E, e + 1);
  const top = (score: Float64Array): number[] =>
    [...score.keys()].sort((a, b) => score[b] - score[a] || a - b).slice(0, K);
  const rows: TraceLookaheadRow[] = [];
  for (let d = 1; d <= depths; d++) {
    // co[l][e·E + e']: tokens where layer l chose e and layer l+d chose e'
    const co = Array.from({ length: layers - d }, () => new Float64Array(E * E));
    const freq = Array.from({ length: layers }, () => new Float64Array(E));
    let hitCo = 0;
    let hitFreq = 0;
    let hitPrev = 0;
    let n = 0;
    trace.forEach((tok, t) => {
      for (let l = 0; l + d < layers; l++) {
        const want = new Set(tok[l + d]);
        if (t >= warmup) {
          const score = new Float64Array(E);
          for (const e of tok[l]) for (let x = 0; x < E; x++) score[x] += co[l][e * E + x];
          for (const x of top(score)) if (want.has(x)) hitCo++;
          for (const x of top(freq[l + d])) if (want.has(x)) hitFreq++;
          for (const x of trace[t - 1][l + d].slice(0, K)) if (want.has(x)) hitPrev++;
          n += K;
        }
        for (const e of tok[l]) for (const x of tok[l + d]) co[l][e * E + x]++;
      }
      for (let l = 0; l < layers; l++) for (const e of tok[l]) freq[l][e]++;
    });
    rows.push({ depth: d, cooccurrence: hitCo / n, frequency: hitFreq / n, previous: hitPrev / n });
  }
  return { trace: file, tokens: trace.length, layers, guesses: K, warmup, rows };
}

export function renderTraceLookahead(r: TraceLookaheadResult): string {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`.padStart(9);
  return [
    `${r.trace}: ${r.tokens} tokens, ${r.layers} MoE layers; ${r.guesses} guesses per layer, scored from token ${r.warmup} on (precision = recall)`,
    'depth  co-occurrence  frequency  previous token',
    ...r.rows.map((x) => `${String(x.depth).padStart(5)}  ${pct(x.cooccurrence)}     ${pct(x.frequency)}  ${pct(x.previous)}`),
    '',
  ].join('\n');
}
