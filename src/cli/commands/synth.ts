import type { Command } from 'commander';
import { Option } from 'commander';
import { writeSyntheticContainer, type ShapeName } from '../../synth/synth.js';
import { intArg } from '../args.js';
import { Progress } from '../progress.js';

export function registerSynth(program: Command): void {
  program
    .command('synth')
    .description('write a synthetic container of random weights (try the engine or benchmark real shapes without a download)')
    .argument('<out_dir>', 'directory to create')
    .addOption(new Option('--shape <shape>', 'model shape').choices(['tiny', 'kimi-linear']).default('tiny'))
    .option('--layers <n>', 'number of layers (keeps the 3:1 KDA:MLA pattern, MLA last)', intArg(1, 512))
    .option('--experts <n>', 'routed experts per MoE layer', intArg(1, 65536))
    .option('--seed <n>', 'random seed (same seed, same bytes)', intArg(0, 2 ** 32 - 1), 0)
    .addOption(
      new Option('--trunk-formats <how>', 'converter: what waste convert writes; mixed: every matrix format in turn; f32: all F32 (default: converter for kimi-linear, mixed for tiny)')
        .choices(['converter', 'mixed', 'f32']),
    )
    .option('--no-tokenizer', 'leave out the small tokenizer (then the model takes token ids only)')
    .option('--force', 'replace a non-empty output directory', false)
    .option('-q, --quiet', 'no progress output', false)
    .action(
      (out: string, o: { shape: ShapeName; layers?: number; experts?: number; seed: number; trunkFormats?: 'converter' | 'mixed' | 'f32'; tokenizer: boolean; force: boolean; quiet: boolean }) => {
        const bar = new Progress('synth', 1, o.quiet);
        const cfg = writeSyntheticContainer(out, {
          shape: o.shape,
          layers: o.layers,
          experts: o.experts,
          seed: o.seed,
          trunkFormats: o.trunkFormats,
          force: o.force,
          tokenizer: o.tokenizer,
          onProgress: (done, total) => {
            bar.total = total;
            bar.update(done);
          },
        });
        bar.done();
        process.stdout.write(
          `wrote ${out}: ${cfg.layers} layers, hidden ${cfg.hidden}, ${cfg.moe.experts} experts (top-${cfg.moe.topK}), vocab ${cfg.vocab}\n`,
        );
      },
    );
}
