import type { Command } from 'commander';
import { Option } from 'commander';
import { convert } from '../../convert/convert.js';
import { DEFAULT_SETTINGS } from '../../convert/plan.js';
import { formatSize } from '../../util/size.js';
import { intArg } from '../args.js';
import { stoppable } from '../interrupt.js';
import { Progress, fmtSeconds } from '../progress.js';

export function registerConvert(program: Command): void {
  program
    .command('convert')
    .description('convert a HuggingFace checkpoint (any family this build runs) into a WASTE container (VQ3R experts, Q4G trunk); resumable: run it again after an interruption')
    .argument('<hf_dir>', 'checkpoint directory: config.json, model.safetensors or model-*.safetensors with its index, tiktoken.model, tokenizer_config.json')
    .argument('<out_dir>', 'container directory to create (published only when complete; work happens in OUT_DIR.partial)')
    .addOption(new Option('--trunk-bits <n>', 'bits of the bulk of the trunk: 4 (Q4G; embedding and head stay Q8G), 8 (all Q8G) or 16 (all F16, to measure what trunk quantization costs; the C engine cannot read F16 trunks)').choices(['4', '8', '16']).default('4'))
    .option('--seed <n>', 'seed of the codebook training (same seed and input, same bytes)', intArg(0, 2 ** 32 - 1), DEFAULT_SETTINGS.seed)
    .option('--iters <n>', 'k-means iterations per codebook stage', intArg(0, 1000), DEFAULT_SETTINGS.iters)
    .option('--cb-sample <n>', 'experts per layer sampled to train its codebooks', intArg(1, 65536), DEFAULT_SETTINGS.cbSample)
    .option('--train-vectors <n>', 'training vectors per layer and matrix kind', intArg(256, 100_000_000), DEFAULT_SETTINGS.trainVectors)
    .option('--threads <n>', 'threads for k-means and encoding (default: every core)', intArg(1, 256))
    .option('--force', 'replace an existing container at OUT_DIR (kept intact until the new one is complete)', false)
    .option('-q, --quiet', 'no progress output', false)
    .action(
      async (
        src: string,
        out: string,
        o: { trunkBits: string; seed: number; iters: number; cbSample: number; trainVectors: number; threads?: number; force: boolean; quiet: boolean },
      ) => {
        const bar = new Progress('convert', 1, o.quiet, process.stderr, formatSize);
        const r = await stoppable('conversion', (signal) => convert(src, out, {
          signal,
          trunkBits: o.trunkBits === '16' ? 16 : o.trunkBits === '8' ? 8 : 4,
          seed: o.seed,
          iters: o.iters,
          cbSample: o.cbSample,
          trainVectors: o.trainVectors,
          threads: o.threads,
          force: o.force,
          log: (line) => {
            if (!o.quiet) bar.print(line);
          },
          onProgress: (done, total, what) => {
            bar.total = total;
            bar.note = what;
            bar.update(done);
          },
        }));
        bar.done();
        if (!r) return;
        const rate = r.seconds > 0 ? r.convertedBytes / r.seconds : 0;
        process.stdout.write(
          `wrote ${r.out}: ${formatSize(r.plan.totalBytes)} (trunk ${formatSize(r.plan.trunkBytes)}, ${r.plan.layers.length} expert banks) from ${formatSize(r.plan.sourceBytes)} of weights` +
            `${r.resumed ? ', resumed' : ''}; ${fmtSeconds(r.seconds)}${rate ? `, ${formatSize(rate)}/s` : ''}\n`,
        );
      },
    );
}
