import type { Command } from 'commander';
import { Option } from 'commander';
import { type ShapeName, type TrunkFormats, synthShapes, writeSyntheticContainer } from '../../synth/synth.js';
import { intArg } from '../args.js';
import { Progress } from '../progress.js';

export function registerSynth(program: Command): void {
  program
    .command('synth')
    .description('write a synthetic container of random weights (try the engine or benchmark real shapes without a download)')
    .argument('<out_dir>', 'directory to create')
    .addOption(
      new Option('--shape <shape>', `model shape (${synthShapes().map((f) => `${f.families.join(' and ')}: ${f.shapes.join(', ')}`).join('; ')}); the releases' real widths are named after them: use --layers and --experts to fit a disk`)
        .choices(synthShapes().flatMap((f) => f.shapes))
        .default('tiny'),
    )
    .option('--layers <n>', "number of layers (keeps the family's layer pattern)", intArg(1, 512))
    .option('--experts <n>', 'routed experts per MoE layer', intArg(1, 65536))
    .option('--seed <n>', 'random seed (same seed, same bytes)', intArg(0, 2 ** 32 - 1), 0)
    .addOption(
      new Option('--trunk-formats <how>', 'converter: what waste convert writes (F32 below 65,536 values); quantized: the same at any size (Q8G embedding and head, Q4G other matrices); mixed: every matrix format in turn; f32: all F32 (default: converter for a release\'s real widths; for small shapes, the family\'s choice: mixed, or quantized)')
        .choices(['converter', 'quantized', 'mixed', 'f32']),
    )
    .option('--sparse', 'sizes only: trunk.bin and the banks as sparse files with nothing in them, for plan and info at a scale the disk cannot hold (such a container cannot run)', false)
    .option('--no-tokenizer', 'leave out the small tokenizer (then the model takes token ids only)')
    .option('--force', 'replace a non-empty output directory', false)
    .option('-q, --quiet', 'no progress output', false)
    .action(
      (out: string, o: { shape: ShapeName; layers?: number; experts?: number; seed: number; trunkFormats?: TrunkFormats; sparse: boolean; tokenizer: boolean; force: boolean; quiet: boolean }) => {
        const bar = new Progress('synth', 1, o.quiet);
        const cfg = writeSyntheticContainer(out, {
          shape: o.shape,
          layers: o.layers,
          experts: o.experts,
          seed: o.seed,
          trunkFormats: o.trunkFormats,
          sparse: o.sparse,
          force: o.force,
          tokenizer: o.tokenizer,
          onProgress: (done, total) => {
            bar.total = total;
            bar.update(done);
          },
        });
        bar.done();
        process.stdout.write(
          `wrote ${out}: ${cfg.archName}, ${cfg.layers} layers, hidden ${cfg.hidden}, ${cfg.moe.experts} experts (top-${cfg.moe.topK}${cfg.expertWidth !== cfg.hidden ? `, ${cfg.expertWidth} wide` : ''}), vocab ${cfg.vocab}${o.sparse ? ' (sparse: sizes only)' : ''}\n`,
        );
      },
    );
}
