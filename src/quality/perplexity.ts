import type { Model } from '../api/model.js';
import { WasteError } from '../util/errors.js';
import { nll } from './metrics.js';
import { walkWindows, windowCount } from './windows.js';

/**
 * Perplexity of `ids` under one model, scored exactly as `measureQuality` scores it (windows of
 * `ctx`, second halves), so the number can be compared with a quality report's.
 */
export async function perplexity(
  model: Model,
  ids: number[],
  opts: { ctx?: number; windows?: number; onProgress?: (done: number, total: number) => void } = {},
): Promise<{ perplexity: number; scored: number; windows: number }> {
  const ctx = opts.ctx ?? 512;
  if (!(Number.isInteger(ctx) && ctx >= 4)) throw new WasteError('E_ARG', `the window must be at least 4 tokens (got ${ctx})`);
  const windows = windowCount(ids.length, ctx, opts.windows);
  if (windows < 1) throw new WasteError('E_ARG', `${ids.length} tokens do not fill one window of ${ctx}`);
  const session = model.newSession();
  let sum = 0;
  let scored = 0;
  try {
    await walkWindows(
      [session],
      ids,
      ctx,
      windows,
      model.config.vocab,
      ([row], next) => {
        sum += nll(row, next);
        scored++;
      },
      opts.onProgress,
    );
  } finally {
    session.close();
  }
  return { perplexity: Math.exp(sum / scored), scored, windows };
}
