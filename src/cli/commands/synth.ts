import type { Command } from 'commander';
import { Option } from 'commander';
import { SHAPES, type ShapeName, type TrunkFormats, writeSyntheticContainer } from '../../synth/synth.js';
import { intArg } from '../args.js';
import { Progress } from '../progress.js';

export function registerSynth(program: Command): void {
  program
    .command('synth')
    .description('write a synthetic container of random weights (try the engine or benchmark real shapes without a download)')
    .argument('<out_dir>', 'directory to create')
    .addOption(new Option('--shape <shape>', "model shape: tiny and kimi-linear (Kimi-Linear's real widths), k3-tiny and k3 (Kimi K3's real widths: use --layers and --experts to fit a disk)").choices(Object.keys(SHAPES)).default('tiny'))
    .option('--layers <n>', 'number of layers (keeps the 3:1 KDA:MLA pattern, MLA last)', intArg(1, 512))
    .option('--experts <n>', 'routed experts per MoE layer', intArg(1, 65536))
    .option('--seed <n>', 'random seed (same seed, same bytes)', intArg(0, 2 ** 32 - 1), 0)
    .addOption(
      new Option('--trunk-formats <how>', 'converter: what waste convert writes (F32 below 65,536 values); quantized: the same at any size (Q8G embedding and head, Q4G other matrices); mixed: every matrix format in turn; f32: all F32 (default: converter for kimi-linear and k3, quantized for k3-tiny, mixed for tiny)')
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
          `wrote ${out}: ${cfg.archName}, ${cfg.layers} layers, hidden ${cfg.hidden}, ${cfg.moe.experts} experts (top-${cfg.moe.topK}${cfg.latent ? `, latent ${cfg.latent.width}` : ''}), vocab ${cfg.vocab}${o.sparse ? ' (sparse: sizes only)' : ''}\n`,
        );
      },
    );
}
