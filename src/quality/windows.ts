import type { Session } from '../api/session.js';

/** Logits are taken this many positions at a time, so memory stays bounded for a large vocabulary. */
const LOGIT_ROWS = 32;

/**
 * llama.cpp's --kl-divergence protocol: the text is cut into windows of `ctx` tokens, each window
 * runs from a fresh state in every session, and the positions of its second half are scored (each
 * has at least ctx/2 tokens of context). `score` gets, for each scored position, every session's
 * logits row and the token that follows.
 */
export async function walkWindows(
  sessions: Session[],
  ids: number[],
  ctx: number,
  windows: number,
  vocab: number,
  score: (rows: Float32Array[], next: number) => void,
  onProgress?: (done: number, total: number) => void,
): Promise<void> {
  const half = ctx >> 1;
  onProgress?.(0, windows);
  for (let w = 0; w < windows; w++) {
    const win = ids.slice(w * ctx, (w + 1) * ctx);
    for (const s of sessions) s.reset();
    // the logits after token half-1 … ctx-2 are scored, each against the token that follows
    const first: Float32Array[] = [];
    for (const s of sessions) first.push(await s.forward(win.slice(0, half)));
    score(first, win[half]);
    for (let p = half; p < ctx - 1; p += LOGIT_ROWS) {
      const part = win.slice(p, Math.min(ctx - 1, p + LOGIT_ROWS));
      const all: Float32Array[] = [];
      for (const s of sessions) all.push(await s.forward(part, { allLogits: true }));
      for (let i = 0; i < part.length; i++)
        score(
          all.map((l) => l.subarray(i * vocab, (i + 1) * vocab)),
          win[p + i + 1],
        );
    }
    onProgress?.(w + 1, windows);
  }
}

/** How many whole windows `tokens` fill, at most `limit`. */
export function windowCount(tokens: number, ctx: number, limit?: number): number {
  const available = Math.floor(tokens / ctx);
  return Math.min(available, limit ?? available);
}
