import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Model, type OpenOptions } from '../api/model.js';

export interface WarmBenchOptions extends OpenOptions {
  /** Tokens the learning run decodes (default 32). */
  learnTokens?: number;
  /** Tokens measured after the prompt in each cold or warm run (default 8). */
  tokens?: number;
  promptTokens?: number;
  /** Cold and warm runs, alternating (default 3 of each). */
  rounds?: number;
  log?: (s: string) => void;
}

export interface WarmRun {
  warm: boolean;
  warmed: number;
  /** Demand hit rate over the prompt and the measured tokens. */
  hit_rate: number;
  misses: number;
  /** Prompt (one prefill) and measured tokens, seconds. */
  first_token_s: number;
  decode_tok_s: number;
}

export interface WarmBenchResult {
  model: string;
  cache_slots: number;
  learned_entries: number;
  learn_tokens: number;
  tokens: number;
  prompt_tokens: number;
  runs: WarmRun[];
}

/**
 * What a learned hotlist buys the next open: one run decodes a token sequence and learns (into a
 * hotlist of its own, so the container's is left alone); then cold opens (no hotlist) and warm ones
 * alternate on a different prompt and tokens, and the first tokens' hit rate and speed are compared.
 */
export async function benchWarm(dir: string, opts: WarmBenchOptions = {}): Promise<WarmBenchResult> {
  const { learnTokens = 32, tokens = 8, promptTokens = 16, rounds = 3, log = () => {}, ...open } = opts;
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'waste-bench-warm-'));
  const usageFile = path.join(scratch, 'usage.waste');
  const maxContext = Math.max(learnTokens, tokens + promptTokens) + 2;
  try {
    log(`learning from ${learnTokens} tokens…`);
    const learner = await Model.open(dir, { ...open, maxContext, warm: false, learn: true, usageFile });
    let vocab = 0;
    let slots = 0;
    try {
      vocab = learner.config.vocab;
      slots = learner.stats().slots;
      const s = learner.newSession();
      for (let i = 0; i < learnTokens; i++) await s.forward([(i * 40503 + 7) % vocab]);
    } finally {
      await learner.close();
    }
    const learned = (fs.statSync(usageFile).size - 16) / 16;
    const runs: WarmRun[] = [];
    for (let r = 0; r < rounds; r++)
      for (const warm of [false, true]) {
        log(`round ${r + 1}/${rounds}, ${warm ? 'warm' : 'cold'}…`);
        const m = await Model.open(dir, { ...open, maxContext, warm, learn: false, usageFile });
        try {
          const warmed = m.stats().warmed;
          const s = m.newSession();
          const t0 = performance.now();
          await s.forward(Array.from({ length: promptTokens }, (_, i) => (i * 7919 + 13) % vocab));
          const t1 = performance.now();
          for (let i = 0; i < tokens; i++) await s.forward([((i + 1) * 2654435761 + 97) % vocab]);
          const t2 = performance.now();
          const st = m.stats();
          runs.push({ warm, warmed, hit_rate: st.hitRate, misses: st.misses, first_token_s: (t1 - t0) / 1000, decode_tok_s: tokens / ((t2 - t1) / 1000) });
        } finally {
          await m.close();
        }
      }
    return { model: dir, cache_slots: slots, learned_entries: learned, learn_tokens: learnTokens, tokens, prompt_tokens: promptTokens, runs };
  } finally {
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

export function renderWarmBench(r: WarmBenchResult): string {
  const med = (xs: number[]) => {
    const s = [...xs].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const lines = [`${r.model}: ${r.cache_slots} cache slots; learned ${r.learned_entries} experts from ${r.learn_tokens} tokens; then a ${r.prompt_tokens}-token prompt and ${r.tokens} tokens, cold and warm alternating (medians)`];
  for (const warm of [false, true]) {
    const rs = r.runs.filter((x) => x.warm === warm);
    lines.push(
      `${warm ? 'warm' : 'cold'}: ${med(rs.map((x) => x.warmed))} loaded at open, hit rate ${(100 * med(rs.map((x) => x.hit_rate))).toFixed(1)}%, ${med(rs.map((x) => x.misses))} misses, prompt ${med(rs.map((x) => x.first_token_s)).toFixed(2)} s, then ${med(rs.map((x) => x.decode_tok_s)).toFixed(3)} tok/s`,
    );
  }
  return lines.join('\n') + '\n';
}
