import { WasteError } from '../util/errors.js';
import { Rng } from '../util/prng.js';
import { logSumExp } from '../util/log-sum-exp.js';

/**
 * Sampling options. Temperature 0 (the default) is greedy: the most likely token, the lowest id on a
 * tie. Otherwise the penalties adjust the logits, then top-k, min-p and top-p narrow the candidates
 * and one is drawn with a generator seeded by `seed`: the same seed and logits give the same token.
 */
export interface SamplingOptions {
  temperature?: number;
  /** Keep the k most likely tokens (0 = off). */
  topK?: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p (1 = off). */
  topP?: number;
  /** Drop tokens less likely than minP × the most likely one's probability (0 = off). */
  minP?: number;
  /** Divide (multiply, if negative) the logit of every token already in the context (1 = off). */
  repetitionPenalty?: number;
  /** Subtract from the logit of every token generated so far (OpenAI's presence_penalty). */
  presencePenalty?: number;
  /** Subtract this × its count from the logit of every token generated so far (frequency_penalty). */
  frequencyPenalty?: number;
  /**
   * Added to these tokens' logits after the penalties (OpenAI's logit_bias, by token id): -100..100,
   * where -100 all but bans a token and 100 all but forces it.
   */
  logitBias?: Record<number, number>;
  seed?: number;
}

export interface Sampled {
  token: number;
  /** log P(token) under the logits given to `sample`, before penalties, bias and temperature. */
  logprob: number;
}

/** Tokens far below the best one are left out of the candidates: e^-30 of its probability or less. */
const NEGLIGIBLE = 30;

export class Sampler {
  private readonly rng: Rng;
  private readonly temperature: number;
  private readonly topK: number;
  private readonly topP: number;
  private readonly minP: number;
  private readonly repetition: number;
  private readonly presence: number;
  private readonly frequency: number;
  private readonly bias: [number, number][];

  constructor(opts: SamplingOptions = {}) {
    const num = (v: number | undefined, def: number, lo: number, hi: number, what: string) => {
      const x = v ?? def;
      if (!(Number.isFinite(x) && x >= lo && x <= hi)) throw new WasteError('E_ARG', `${what} must be in ${lo}..${hi} (got ${v})`);
      return x;
    };
    this.temperature = num(opts.temperature, 0, 0, 100, 'temperature');
    this.topK = num(opts.topK, 0, 0, 2 ** 31, 'top-k');
    if (!Number.isInteger(this.topK)) throw new WasteError('E_ARG', `top-k must be an integer (got ${opts.topK})`);
    this.topP = num(opts.topP, 1, 0, 1, 'top-p');
    if (this.topP === 0) throw new WasteError('E_ARG', 'top-p must be above 0');
    this.minP = num(opts.minP, 0, 0, 1, 'min-p');
    this.repetition = num(opts.repetitionPenalty, 1, 0.01, 100, 'repetition penalty');
    this.presence = num(opts.presencePenalty, 0, -2, 2, 'presence penalty');
    this.frequency = num(opts.frequencyPenalty, 0, -2, 2, 'frequency penalty');
    this.bias = Object.entries(opts.logitBias ?? {}).map(([k, v]) => {
      const id = Number(k);
      if (!(/^\d+$/.test(k) && Number.isSafeInteger(id))) throw new WasteError('E_ARG', `logit bias: "${k}" is not a token id`);
      return [id, num(v, 0, -100, 100, `logit bias of token ${id}`)];
    });
    const seed = opts.seed ?? 0;
    if (!(Number.isInteger(seed) && seed >= 0 && seed < 2 ** 32)) throw new WasteError('E_ARG', `seed must be an integer in 0..${2 ** 32 - 1} (got ${seed})`);
    this.rng = new Rng(seed);
  }

  /**
   * Pick the next token from `logits` (not modified). `context` is every token the model has seen
   * (for the repetition penalty), `generated` the ones it produced in this reply (for presence and
   * frequency).
   */
  sample(logits: Float32Array, context: ArrayLike<number> = [], generated: ArrayLike<number> = []): Sampled {
    const V = logits.length;
    const lse = logSumExp(logits);
    let adj: Float32Array | Float64Array = logits;
    if (this.repetition !== 1 || this.presence !== 0 || this.frequency !== 0 || this.bias.length) {
      const a = Float64Array.from(logits);
      if (this.repetition !== 1) {
        const seen = new Set<number>();
        for (let i = 0; i < context.length; i++) seen.add(context[i]);
        for (const t of seen) if (t >= 0 && t < V) a[t] = a[t] > 0 ? a[t] / this.repetition : a[t] * this.repetition;
      }
      if (this.presence !== 0 || this.frequency !== 0) {
        const count = new Map<number, number>();
        for (let i = 0; i < generated.length; i++) count.set(generated[i], (count.get(generated[i]) ?? 0) + 1);
        for (const [t, n] of count) if (t >= 0 && t < V) a[t] -= this.presence + this.frequency * n;
      }
      for (const [t, b] of this.bias) {
        if (t >= V) throw new WasteError('E_ARG', `logit bias names token ${t}, beyond the vocabulary of ${V}`);
        a[t] += b;
      }
      adj = a;
    }
    let best = 0;
    for (let i = 1; i < V; i++) if (adj[i] > adj[best]) best = i;
    if (this.temperature === 0 || this.topK === 1) return { token: best, logprob: logits[best] - lse };

    const { ids, p } = nucleus(adj, best, this.temperature, this.topK, this.topP, this.minP);
    let total = 0;
    for (let i = 0; i < p.length; i++) total += p[i];
    let r = this.rng.float() * total;
    let pick = ids[ids.length - 1];
    for (let i = 0; i < ids.length; i++) {
      r -= p[i];
      if (r < 0) {
        pick = ids[i];
        break;
      }
    }
    return { token: pick, logprob: logits[pick] - lse };
  }
}

/**
 * The tokens a draw chooses among, with their weights relative to the best: every token within
 * e^-30 of the best at this temperature, cut by min-p, top-k and top-p — most likely first (the
 * lower id on a tie) when top-k or top-p cut them, else in id order. Nothing sorts the whole
 * candidate set (on a 163,840-token vocabulary it can be most of it, and a comparison sort took
 * ~100 ms a token): min-p is a threshold, top-k and top-p pop a heap only as far as they reach.
 */
export function nucleus(adj: ArrayLike<number>, best: number, temperature: number, topK: number, topP: number, minP: number): { ids: Int32Array; p: Float64Array } {
  const top = adj[best];
  // the weight relative to the best is exp((adj - top) / T); min-p keeps weights >= minP
  const lowest = Math.max(top - NEGLIGIBLE * temperature, minP > 0 ? top + temperature * Math.log(minP) : -Infinity);
  const V = adj.length;
  let n = 0;
  const ids = new Int32Array(V);
  for (let i = 0; i < V; i++) if (adj[i] >= lowest) ids[n++] = i;
  const k = topK > 0 ? Math.min(topK, n) : n;
  if (k === n && topP >= 1) {
    const p = new Float64Array(n);
    for (let j = 0; j < n; j++) p[j] = Math.exp((adj[ids[j]] - top) / temperature);
    return { ids: ids.subarray(0, n), p };
  }
  // a binary heap of the candidates, the first-ranked on top
  const before = (a: number, b: number) => adj[a] > adj[b] || (adj[a] === adj[b] && a < b);
  const down = (at: number, size: number) => {
    const x = ids[at];
    for (;;) {
      let c = 2 * at + 1;
      if (c >= size) break;
      if (c + 1 < size && before(ids[c + 1], ids[c])) c++;
      if (!before(ids[c], x)) break;
      ids[at] = ids[c];
      at = c;
    }
    ids[at] = x;
  };
  for (let j = (n >> 1) - 1; j >= 0; j--) down(j, n);
  if (k < n) {
    // top-k: the mass top-p is measured against is the k first tokens' (pop them into order)
    let total = 0;
    const kept = new Int32Array(k);
    for (let j = 0, size = n; j < k; j++) {
      kept[j] = ids[0];
      total += Math.exp((adj[ids[0]] - top) / temperature);
      ids[0] = ids[--size];
      down(0, size);
    }
    let m = k;
    if (topP < 1) {
      let cum = 0;
      for (m = 0; m < k; ) {
        cum += Math.exp((adj[kept[m++]] - top) / temperature);
        if (cum >= topP * total) break;
      }
    }
    const p = new Float64Array(m);
    for (let j = 0; j < m; j++) p[j] = Math.exp((adj[kept[j]] - top) / temperature);
    return { ids: kept.subarray(0, m), p };
  }
  let total = 0;
  for (let j = 0; j < n; j++) total += Math.exp((adj[ids[j]] - top) / temperature);
  const out: number[] = [];
  const p: number[] = [];
  let cum = 0;
  for (let size = n; size > 0; ) {
    const t = ids[0];
    const w = Math.exp((adj[t] - top) / temperature);
    out.push(t);
    p.push(w);
    cum += w;
    if (cum >= topP * total) break;
    ids[0] = ids[--size];
    down(0, size);
  }
  return { ids: Int32Array.from(out), p: Float64Array.from(p) };
}

/** The n most likely tokens and their log-probabilities under the model's distribution. */
export function topLogprobs(logits: Float32Array, n: number): { token: number; logprob: number }[] {
  const lse = logSumExp(logits);
  const top: number[] = [];
  for (let i = 0; i < logits.length; i++) {
    if (top.length < n) {
      top.push(i);
      top.sort((a, b) => logits[b] - logits[a] || a - b);
    } else if (logits[i] > logits[top[n - 1]]) {
      top[n - 1] = i;
      top.sort((a, b) => logits[b] - logits[a] || a - b);
    }
  }
  return top.map((t) => ({ token: t, logprob: logits[t] - lse }));
}
