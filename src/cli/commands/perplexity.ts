import type { Command } from 'commander';
import { requireTokenizerFiles } from '../../tokenizer/load.js';
import { Model } from '../../api/model.js';
import { perplexity } from '../../quality/perplexity.js';
import { windowCount } from '../../quality/windows.js';
import { WasteError } from '../../util/errors.js';
import { intArg } from '../args.js';
import { modelAndPrompt } from '../default-model.js';
import { type EngineFlags, addEngineOptions, openOptions } from '../engine-options.js';
import { Progress } from '../progress.js';
import { readPrompt } from './run.js';

export function registerPerplexity(program: Command): void {
  addEngineOptions(
    program
      .command('perplexity')
      .description("perplexity of a text under the model (no chat format): the text is cut into windows of --window tokens, each run from a fresh state, and the second half of each is scored (the same protocol as waste quality and llama.cpp's perplexity)")
      .argument('[model]', 'container directory (default: the demo model that ships with waste)')
      .argument('[text]', 'the text (or --file F, or standard input)')
      .option('--file <file>', 'read the text from a file (- for standard input)')
      .option('--window <n>', 'window length in tokens', intArg(4, 1 << 20), 512)
      .option('--windows <n>', 'score at most this many windows', intArg(1))
      .option('--json', 'print JSON', false)
      .option('-q, --quiet', 'no progress output', false),
  ).action(async (first: string | undefined, second: string | undefined, o: EngineFlags & { file?: string; window: number; windows?: number; json: boolean; quiet: boolean }) => {
    const { model, prompt } = modelAndPrompt(first, second);
    const text = readPrompt(prompt, o.file);
    requireTokenizerFiles(model);
    const m = await Model.open(model, { ...openOptions(o), maxContext: Math.max(o.ctx, o.window) });
    try {
      const ids = m.tokenize(text);
      const windows = windowCount(ids.length, o.window, o.windows);
      if (windows < 1) throw new WasteError('E_ARG', `the text is ${ids.length} tokens, less than one window of ${o.window}: give more text or a smaller --window`);
      const bar = new Progress('perplexity', windows, o.quiet, process.stderr, (n) => `${n} windows`);
      const r = await perplexity(m, ids, { ctx: o.window, windows, onProgress: (done) => bar.update(done) });
      bar.done();
      if (o.json) process.stdout.write(JSON.stringify({ perplexity: r.perplexity, scored_tokens: r.scored, windows: r.windows, window: o.window, text_tokens: ids.length }, null, 2) + '\n');
      else process.stdout.write(`perplexity ${r.perplexity.toFixed(4)} over ${r.scored} scored tokens (${r.windows} window${r.windows === 1 ? '' : 's'} of ${o.window} of the text's ${ids.length} tokens)\n`);
    } finally {
      await m.close();
    }
  });
}
