import * as fs from 'node:fs';
import * as path from 'node:path';
import { Model, type OpenOptions } from '../api/model.js';
import { argmax, klDivergence, nll, percentile } from '../quality/metrics.js';
import { walkWindows, windowCount } from '../quality/windows.js';
import { DEMO_MODEL } from '../store/names.js';
import { requireTokenizer } from '../tokenizer/load.js';
import { table } from './measure.js';

export interface ActivationsBenchResult {
  model: string;
  text: string;
  ctx: number;
  windows: number;
  scored: number;
  /** KL(exact ‖ a16) per scored position, in nats. */
  kl: { mean: number; stderr: number; median: number; p99: number; max: number };
  /** Share of scored positions whose most likely next token is the same in both modes. */
  top1: number;
  perplexity: { exact: number; a16: number };
  /** Largest |Δ logit| / max |logit| of a scored row. */
  maxRelLogitDiff: number;
}

/**
 * What 16-bit activations cost in quality: the same container opened twice, with exact and with
 * a16 activations, scored on a text as `waste quality` scores a conversion (windows of `ctx`, the
 * second half of each) — with the exact run as the reference.
 */
export async function benchActivations(opts: { model?: string; text?: string; ctx?: number; windows?: number; open?: OpenOptions; log?: (s: string) => void } = {}): Promise<ActivationsBenchResult> {
  const model = opts.model ?? DEMO_MODEL;
  const text = opts.text ?? path.join(DEMO_MODEL, 'heldout-sample.txt');
  const ctx = opts.ctx ?? 256;
  const ids = requireTokenizer(model).encode(fs.readFileSync(text, 'utf8'));
  const windows = windowCount(ids.length, ctx, opts.windows);
  if (windows < 1) throw new Error(`${ids.length} tokens do not fill one window of ${ctx}`);
  const exact = await Model.open(model, { ...opts.open, activations: 'exact', maxContext: ctx });
  const a16 = await Model.open(model, { ...opts.open, activations: 'a16', maxContext: ctx });
  try {
    const kls: number[] = [];
    let same = 0;
    let nllE = 0;
    let nllA = 0;
    let rel = 0;
    const sessions = [exact.newSession(), a16.newSession()];
    await walkWindows(sessions, ids, ctx, windows, exact.config.vocab, ([e, a], next) => {
      kls.push(klDivergence(e, a));
      if (argmax(e) === argmax(a)) same++;
      nllE += nll(e, next);
      nllA += nll(a, next);
      let d = 0;
      let m = 0;
      for (let i = 0; i < e.length; i++) {
        d = Math.max(d, Math.abs(a[i] - e[i]));
        m = Math.max(m, Math.abs(e[i]));
      }
      rel = Math.max(rel, d / m);
    }, (done, total) => opts.log?.(`window ${done} of ${total}`));
    for (const s of sessions) s.close();
    const n = kls.length;
    const mean = kls.reduce((s, x) => s + x, 0) / n;
    const variance = n > 1 ? kls.reduce((s, x) => s + (x - mean) ** 2, 0) / (n - 1) : 0;
    return {
      model,
      text,
      ctx,
      windows,
      scored: n,
      kl: { mean, stderr: Math.sqrt(variance / n), median: percentile(kls, 50), p99: percentile(kls, 99), max: Math.max(...kls) },
      top1: same / n,
      perplexity: { exact: Math.exp(nllE / n), a16: Math.exp(nllA / n) },
      maxRelLogitDiff: rel,
    };
  } finally {
    await a16.close();
    await exact.close();
  }
}

export function renderActivationsBench(r: ActivationsBenchResult): string {
  const e = (x: number) => x.toExponential(2);
  return (
    `${r.model}, ${r.text}: ${r.windows} windows of ${r.ctx}, ${r.scored} positions scored, exact as the reference\n` +
    table(
      [[e(r.kl.mean), e(r.kl.stderr), e(r.kl.median), e(r.kl.p99), e(r.kl.max), `${(100 * r.top1).toFixed(2)} %`, r.perplexity.exact.toFixed(4), r.perplexity.a16.toFixed(4), e(r.maxRelLogitDiff)]],
      ['mean KL', '± stderr', 'median', 'p99', 'max', 'same top-1', 'ppl exact', 'ppl a16', 'max |Δ|/max |logit|'],
    )
  );
}
