import type { Command } from 'commander';
import { type PullPlan, parseSpec, planPull, pull } from '../../pull/pull.js';
import { knownModel, knownModels, knownPeaks } from '../../pull/known.js';
import { formatSize } from '../../util/size.js';
import { intArg } from '../args.js';
import { stoppable } from '../interrupt.js';
import { Progress, fmtSeconds } from '../progress.js';

export function registerPull(program: Command): void {
  program
    .command('pull')
    .description('download a HuggingFace checkpoint and convert it into the local model store ($WASTE_HOME, default ~/.cache/waste) as its shards arrive; resumable: run it again after an interruption')
    .argument('<repo>', `OWNER/NAME[@REVISION] on the hub ($HF_ENDPOINT, $HF_TOKEN honoured), or a short name: ${knownModels().map((k) => k.short).join(', ')}`)
    .option('--name <name>', 'the name to store it under (default: the short name, else the repository name)')
    .option('--keep-source', 'keep the downloaded checkpoint (in $WASTE_HOME/downloads/NAME) instead of deleting each shard once converted', false)
    .option('--dry-run', 'print sizes, the floor and the disk needed, and fetch nothing (a short name: not even the listing)', false)
    .option('--threads <n>', 'threads for the conversion (default: every core)', intArg(1, 256))
    .option('--force', 'replace a stored model of the same name (kept until the new one is complete)', false)
    .option('-q, --quiet', 'no progress output', false)
    .action(async (spec: string, o: { name?: string; keepSource: boolean; dryRun: boolean; threads?: number; force: boolean; quiet: boolean }) => {
      let bar: Progress | undefined;
      const log = (line: string) => {
        if (o.quiet) return;
        if (bar) bar.print(line);
        else process.stderr.write(`${line}\n`);
      };
      if (o.dryRun) {
        const { short } = parseSpec(spec);
        const k = short ? knownModel(short) : undefined;
        if (k && !spec.includes('@')) {
          const peak = knownPeaks(k);
          process.stdout.write(
            [
              `${k.short}: ${k.repo} (${k.parameters} parameters; published figures, nothing fetched)`,
              `  checkpoint      ${formatSize(k.checkpointBytes)} in ${k.shards} shards`,
              `  container       ${formatSize(k.containerBytes)}`,
              `  floor (4K ctx)  ${formatSize(k.floorBytes)} of RAM`,
              `  disk at peak    ${formatSize(peak.streaming)} streaming (container + trunk copies + 2 shards converting + 1 downloading), ${formatSize(peak.full)} downloading everything first (--keep-source)`,
            ].join('\n') + '\n',
          );
          return;
        }
        printPlan(await planPull(spec, { name: o.name, log }));
        return;
      }
      bar = new Progress('pull', 1, o.quiet, process.stderr, formatSize);
      const r = await stoppable('pull', (signal) =>
        pull(spec, {
          name: o.name,
          keepSource: o.keepSource,
          threads: o.threads,
          force: o.force,
          log,
          signal,
          onProgress: (done, total, what) => {
            bar!.total = total;
            bar!.note = what;
            bar!.update(done);
          },
        }),
      );
      bar.done();
      if (!r) return;
      process.stdout.write(
        `stored ${r.plan.name} in ${r.dir}: ${formatSize(r.plan.containerBytes)} from ${r.plan.repo}@${r.plan.revision} (${r.plan.commit.slice(0, 12)}); fetched ${formatSize(r.fetchedBytes)}${r.resumed ? ', resumed' : ''}; ${fmtSeconds(r.seconds)}\n`,
      );
    });
}

function printPlan(p: PullPlan): void {
  process.stdout.write(
    [
      `${p.name}: ${p.repo}@${p.revision} (commit ${p.commit.slice(0, 12)})`,
      `  download        ${formatSize(p.downloadBytes)} in ${p.files.length} files`,
      `  container       ${formatSize(p.containerBytes)} (trunk ${formatSize(p.convert.trunkBytes)}, ${p.convert.layers.length} expert banks)`,
      `  disk at peak    ${formatSize(p.peakStreaming)} streaming, ${formatSize(p.peakFull)} downloading everything first (--keep-source)`,
    ].join('\n') + '\n',
  );
}
