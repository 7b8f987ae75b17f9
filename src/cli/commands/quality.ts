import * as fs from 'node:fs';
import type { Command } from 'commander';
import { measureQuality, type QualityReport } from '../../quality/quality.js';
import { WasteError, fromSystemError } from '../../util/errors.js';
import { table } from '../../bench/measure.js';
import { requireTokenizer } from '../../tokenizer/load.js';
import { intArg } from '../args.js';
import { Progress } from '../progress.js';
import { OPTION_BOUNDS } from '../../engine/options.js';
import { readInput } from '../../util/read.js';

export function registerQuality(program: Command): void {
  program
    .command('quality')
    .description('compare a container with the unquantized checkpoint it came from: KL divergence of next-token distributions, top-1 agreement, perplexity of both, router agreement per layer')
    .argument('<hf_dir>', 'the HuggingFace checkpoint (the reference, run in f32)')
    .argument('<container>', 'the container converted from it')
    .option('--text <file>', "the evaluation text (tokenized with the checkpoint's tokenizer, plain mode)")
    .option('--ids-file <file>', 'or its token ids, separated by spaces, commas or newlines')
    .option('--ctx <n>', 'window length in tokens; the second half of each window is scored', intArg(4, 1 << 20), 512)
    .option('--windows <n>', 'score at most this many windows', intArg(1))
    .option('--threads <n>', 'threads for each model', intArg(...OPTION_BOUNDS.threads))
    .option('--json', 'print the report as JSON', false)
    .option('-q, --quiet', 'no progress output', false)
    .action(async (ref: string, container: string, o: { text?: string; idsFile?: string; ctx: number; windows?: number; threads?: number; json: boolean; quiet: boolean }) => {
      if ((o.text === undefined) === (o.idsFile === undefined)) throw new WasteError('E_ARG', 'give the evaluation text with --text FILE or its ids with --ids-file FILE');
      const ids = o.text !== undefined ? requireTokenizer(ref).encode(readText(o.text)) : readIds(o.idsFile!);
      const bar = new Progress('quality', 1, o.quiet);
      const r = await measureQuality(ref, container, ids, {
        ctx: o.ctx,
        windows: o.windows,
        open: { threads: o.threads },
        onProgress: (done, total) => {
          bar.total = total;
          bar.update(done);
        },
      });
      bar.done();
      process.stdout.write(o.json ? JSON.stringify(r, null, 2) + '\n' : render(r));
    });
}

function readText(file: string): string {
  return readInput(file).toString('utf8');
}

function readIds(file: string): number[] {
  const text = readInput(file).toString('utf8');
  const parts = text.split(/[\s,]+/).filter(Boolean);
  return parts.map((p, i) => {
    if (!/^\d+$/.test(p)) throw new WasteError('E_ARG', `${file}: item ${i + 1} ("${p.slice(0, 20)}") is not a token id`);
    return Number(p);
  });
}

function render(r: QualityReport): string {
  const f = (x: number, d = 4) => x.toFixed(d);
  return (
    `${r.container} against ${r.reference}: ${r.windows} windows of ${r.ctx} tokens, ${r.scored} positions scored\n` +
    `  KL divergence   mean ${f(r.kl.mean, 5)} ± ${f(r.kl.stderr, 5)}   median ${f(r.kl.median, 5)}   p99 ${f(r.kl.p99, 5)}   max ${f(r.kl.max, 5)}\n` +
    `  same top-1      ${f(100 * r.top1, 2)} %\n` +
    `  perplexity      reference ${f(r.perplexity.reference)}   container ${f(r.perplexity.container)}   (${r.perplexity.container >= r.perplexity.reference ? '+' : ''}${f((100 * (r.perplexity.container - r.perplexity.reference)) / r.perplexity.reference, 2)} %)\n` +
    `  router top-k agreement per MoE layer:\n` +
    table(
      r.router.map((x) => [`    ${x.layer}`, `${f(100 * x.agreement, 1)} %`]),
      ['    layer', 'agreement'],
    )
  );
}
