import { Model, type OpenOptions } from '../api/model.js';
import { WasteError } from '../util/errors.js';
import { argmax, klDivergence, nll, percentile } from './metrics.js';
import { walkWindows, windowCount } from './windows.js';

/**
 * How far a container's next-token distributions are from the unquantized reference's, measured
 * the way llama.cpp's --kl-divergence does: the text is cut into windows of `ctx` tokens, each
 * window runs from a fresh state in both models, and the positions of its second half are scored
 * (each has at least ctx/2 tokens of context). Both models also report their routing, so the
 * router's top-k agreement is measured per MoE layer over every token.
 */
export interface QualityOptions {
  /** Window length in tokens (default 512). */
  ctx?: number;
  /** Score at most this many windows (default: as many as the tokens fill). */
  windows?: number;
  /** Options for opening both models (threads, kernels…). */
  open?: OpenOptions;
  /** Windows done, out of the total. */
  onProgress?: (done: number, total: number) => void;
}

export interface QualityReport {
  reference: string;
  container: string;
  ctx: number;
  windows: number;
  /** Positions scored. */
  scored: number;
  /** KL(reference ‖ container) per scored position, in nats. */
  kl: { mean: number; stderr: number; median: number; p99: number; max: number };
  /** Share of scored positions where both models' most likely next token is the same. */
  top1: number;
  /** Perplexity of the text under each model, over the scored positions. */
  perplexity: { reference: number; container: number };
  /** Per MoE layer: the mean share of the reference's top-k experts the container also chose. */
  router: { layer: number; agreement: number }[];
}

export async function measureQuality(referenceDir: string, containerDir: string, ids: number[], opts: QualityOptions = {}): Promise<QualityReport> {
  const ctx = opts.ctx ?? 512;
  if (!(Number.isInteger(ctx) && ctx >= 4)) throw new WasteError('E_ARG', `the window must be at least 4 tokens (got ${ctx})`);
  const windows = windowCount(ids.length, ctx, opts.windows);
  if (windows < 1) throw new WasteError('E_ARG', `${ids.length} tokens do not fill one window of ${ctx}; give more text or a smaller --ctx`);

  const maxContext = Math.max(ctx, 16);
  const ref = await Model.open(referenceDir, { ...opts.open, maxContext });
  let q: Model | undefined;
  try {
    q = await Model.open(containerDir, { ...opts.open, maxContext });
    if (ref.kind !== 'checkpoint') throw new WasteError('E_ARG', `${referenceDir} is not a HuggingFace checkpoint (the reference is the unquantized checkpoint)`);
    const a = ref.config;
    const b = q.config;
    if (a.vocab !== b.vocab || a.hidden !== b.hidden || a.layers !== b.layers || a.moe.experts !== b.moe.experts || a.moe.topK !== b.moe.topK)
      throw new WasteError('E_ARG', `${containerDir} is not a conversion of ${referenceDir}: their configs differ`);
    const bad = ids.findIndex((t) => !(Number.isInteger(t) && t >= 0 && t < a.vocab));
    if (bad >= 0) throw new WasteError('E_ARG', `token ${bad} (${ids[bad]}) is outside the vocabulary of ${a.vocab}`);

    const K = a.moe.topK;
    const routes = [new Map<number, number[]>(), new Map<number, number[]>()];
    const watch = (m: Model, into: Map<number, number[]>) =>
      m.observeRoutes((layer, route) => {
        let list = into.get(layer);
        if (!list) into.set(layer, (list = []));
        for (let i = 0; i < route.length; i++) list.push(route[i]);
      });
    watch(ref, routes[0]);
    watch(q, routes[1]);

    const kls: number[] = [];
    let same = 0;
    let nllRef = 0;
    let nllQ = 0;
    const sRef = ref.newSession();
    const sQ = q.newSession();
    await walkWindows([sRef, sQ], ids, ctx, windows, a.vocab, ([r, c], next) => {
      kls.push(klDivergence(r, c));
      if (argmax(r) === argmax(c)) same++;
      nllRef += nll(r, next);
      nllQ += nll(c, next);
    }, opts.onProgress);
    sRef.close();
    sQ.close();

    const n = kls.length;
    const mean = kls.reduce((s, x) => s + x, 0) / n;
    const variance = n > 1 ? kls.reduce((s, x) => s + (x - mean) ** 2, 0) / (n - 1) : 0;
    const router = [...routes[0].keys()]
      .sort((x, y) => x - y)
      .map((layer) => {
        const r = routes[0].get(layer)!;
        const c = routes[1].get(layer) ?? [];
        let shared = 0;
        const tokens = Math.min(r.length, c.length) / K;
        for (let t = 0; t < tokens; t++) {
          const chosen = new Set(c.slice(t * K, (t + 1) * K));
          for (let j = 0; j < K; j++) if (chosen.has(r[t * K + j])) shared++;
        }
        return { layer, agreement: tokens ? shared / (tokens * K) : NaN };
      });
    return {
      reference: referenceDir,
      container: containerDir,
      ctx,
      windows,
      scored: n,
      kl: { mean, stderr: Math.sqrt(variance / n), median: percentile(kls, 50), p99: percentile(kls, 99), max: kls.reduce((m, x) => Math.max(m, x), -Infinity) },
      top1: same / n,
      perplexity: { reference: Math.exp(nllRef / n), container: Math.exp(nllQ / n) },
      router,
    };
  } finally {
    await q?.close();
    await ref.close();
  }
}
