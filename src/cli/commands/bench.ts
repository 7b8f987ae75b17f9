import { type Command, Option } from 'commander';
import { benchDispatch, renderDispatch } from '../../bench/dispatch.js';
import { benchImage, renderImageBench } from '../../bench/image.js';
import { benchKernels, renderKernelBench } from '../../bench/kernels.js';
import { benchLayers, layerBenchShapes, renderLayerBench } from '../../bench/layers.js';
import { benchPages, renderPageBench } from '../../bench/pages.js';
import { benchStream, renderStream } from '../../bench/stream.js';
import { intArg } from '../args.js';
import { type EngineFlags, addEngineOptions, openOptions } from '../engine-options.js';
import { modelOrDemo } from '../default-model.js';

export function registerBench(program: Command): void {
  addEngineOptions(
    program
      .command('bench')
      .description('measure speed: a model streamed under a budget against the I/O floor (with MODEL); kernel throughput, per-layer decode time, first use of memory pages, thread dispatch (with --kernels, --layers, --pages, --dispatch)')
      .argument('[model]', 'container directory (default, when no --kernels/--layers/--pages/--dispatch: the demo model): decode and prefill speed, hit rate, bytes per token, and the I/O floor measured in the same run')
      .option('--tokens <n>', 'tokens to decode', intArg(1, 1 << 20), 32)
      .option('--prompt-tokens <n>', 'tokens to prefill first', intArg(1, 1 << 20), 16)
      .option('--routing-trace <file>', 'replay a recorded routing trace instead of the router (timing only)')
      .option('--warm-start', "start from the container's learned hotlist (usage.waste), as an open after a learned run does; off by default, so a bench measures a cold cache", false)
      .option('--cache-slots <n>', 'size the expert cache to exactly n records (the budget follows)', intArg(1, 1 << 24))
      .addOption(new Option('--inputs <how>', 'decode inputs: a fixed pseudo-random sequence, or each step\'s most likely token').choices(['random', 'greedy']).default('random')),
  )
    .option('--kernels', 'kernel throughput per thread count, next to the arena read bandwidth measured in the same run', false)
    .option('--layers', 'decode with a real model\'s shapes and every expert in memory: ms per layer against bytes ÷ bandwidth, and a full token projected', false)
    .addOption(new Option('--shape <shape>', 'the real-width shape --layers decodes with (any family\'s release)').choices(layerBenchShapes()).default('kimi-linear'))
    .option('--pages', 'what the first use of a 4 KiB page of engine memory costs, fresh and after a disk read (large on some VMs)', false)
    .option('--dispatch', 'tiny-model decode with 1 and 2 threads', false)
    .option('--image <file>', "with MODEL: the vision tower's time on this image and the prefill cost of its rows, next to as much text")
    .addOption(new Option('--image-route <route>', 'how --image becomes patches').choices(['waste', 'native']).default('waste'))
    .option('--quick', 'smaller buffers and shorter timing (less precise)', false)
    .option('--json', 'print JSON', false)
    .action(async (model: string | undefined, o: EngineFlags & { image?: string; imageRoute: 'waste' | 'native'; kernels: boolean; layers: boolean; pages: boolean; dispatch: boolean; quick: boolean; json: boolean; shape: string; tokens: number; promptTokens: number; routingTrace?: string; inputs: 'random' | 'greedy'; cacheSlots?: number; warmStart: boolean }) => {
      // no model and nothing else chosen: the demo model
      if (!model && !o.kernels && !o.layers && !o.pages && !o.dispatch) model = modelOrDemo(undefined);
      const log = (s: string) => process.stderr.write(`${s}\n`);
      const out: Record<string, unknown> = {};
      if (o.image) {
        const r = await benchImage(model ?? modelOrDemo(undefined), o.image, { ...openOptions(o), route: o.imageRoute, log });
        if (o.json) out.image = r;
        else process.stdout.write(renderImageBench(r));
      } else if (model) {
        const r = await benchStream(model, { ...openOptions(o), warm: o.warmStart && o.warm, tokens: o.tokens, promptTokens: o.promptTokens, routingTrace: o.routingTrace, inputs: o.inputs, cacheSlots: o.cacheSlots, log });
        if (o.json) Object.assign(out, r);
        else process.stdout.write(renderStream(r));
      }
      if (o.kernels) {
        const r = await benchKernels({ quick: o.quick, log });
        if (o.json) out.kernels = r;
        else process.stdout.write(renderKernelBench(r));
      }
      if (o.layers) {
        const r = await benchLayers({ log, shape: o.shape, tokens: o.quick ? 4 : 16, activations: [o.activations] });
        if (o.json) out.layers = r;
        else process.stdout.write(renderLayerBench(r));
      }
      if (o.pages) {
        const r = await benchPages({ log, bytes: o.quick ? 64 << 20 : 256 << 20 });
        if (o.json) out.pages = r;
        else process.stdout.write(renderPageBench(r));
      }
      if (o.dispatch) {
        const r = await benchDispatch(o.quick ? 100 : 400);
        if (o.json) out.dispatch = r;
        else process.stdout.write(renderDispatch(r));
      }
      if (o.json) process.stdout.write(JSON.stringify(out, null, 2) + '\n');
    });
}
