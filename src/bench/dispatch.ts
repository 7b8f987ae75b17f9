import * as os from 'node:os';
import * as path from 'node:path';
import * as fs from 'node:fs';
import { Model } from '../api/model.js';
import { writeSyntheticContainer } from '../synth/synth.js';

export interface DispatchBenchResult {
  shape: string;
  tokensPerSecond: Record<number, number>;
  /** tok/s with 2 threads ÷ tok/s with 1. */
  ratio: number;
}

/**
 * Decode speed of the tiny synthetic model with 1 and 2 threads: what the worker pool costs when
 * there is almost no work to split (the goal: 2 threads no more than 10% slower).
 */
export async function benchDispatch(tokens = 400): Promise<DispatchBenchResult> {
  const dir = path.join(os.tmpdir(), 'waste-bench-tiny');
  if (!fs.existsSync(path.join(dir, 'manifest.json'))) writeSyntheticContainer(dir, { shape: 'tiny', seed: 3, force: true });
  const tps: Record<number, number> = {};
  for (const threads of [1, 2]) {
    let best = 0;
    for (let pass = 0; pass < 3; pass++) {
      const m = await Model.open(dir, { threads, maxContext: tokens + 8 });
      try {
        const s = m.newSession();
        await s.forward([1, 2, 3]);
        const t0 = performance.now();
        for (let i = 0; i < tokens; i++) await s.forward([(i * 31) % m.config.vocab]);
        best = Math.max(best, tokens / ((performance.now() - t0) / 1000));
      } finally {
        await m.close();
      }
    }
    tps[threads] = best;
  }
  return { shape: 'tiny', tokensPerSecond: tps, ratio: tps[2] / tps[1] };
}

export function renderDispatch(r: DispatchBenchResult): string {
  return `tiny model decode: ${r.tokensPerSecond[1].toFixed(0)} tok/s with 1 thread, ${r.tokensPerSecond[2].toFixed(0)} with 2 (ratio ${r.ratio.toFixed(2)})\n`;
}
