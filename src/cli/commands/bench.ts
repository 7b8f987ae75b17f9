import type { Command } from 'commander';
import { benchDispatch, renderDispatch } from '../../bench/dispatch.js';
import { benchKernels, renderKernelBench } from '../../bench/kernels.js';
import { benchLayers, renderLayerBench } from '../../bench/layers.js';
import { WasteError } from '../../util/errors.js';

export function registerBench(program: Command): void {
  program
    .command('bench')
    .description('measure speed: kernel throughput against the measured memory bandwidth, per-layer decode time, thread dispatch cost')
    .option('--kernels', 'kernel throughput per thread count, next to the arena read bandwidth measured in the same run', false)
    .option('--layers', 'decode with real Kimi-Linear shapes and every expert in memory: ms per layer against bytes ÷ bandwidth', false)
    .option('--dispatch', 'tiny-model decode with 1 and 2 threads', false)
    .option('--quick', 'smaller buffers and shorter timing (less precise)', false)
    .option('--json', 'print JSON', false)
    .action(async (o: { kernels: boolean; layers: boolean; dispatch: boolean; quick: boolean; json: boolean }) => {
      if (!o.kernels && !o.layers && !o.dispatch) throw new WasteError('E_ARG', 'choose what to measure: --kernels, --layers or --dispatch');
      const log = (s: string) => process.stderr.write(`${s}\n`);
      const out: Record<string, unknown> = {};
      if (o.kernels) {
        const r = await benchKernels({ quick: o.quick, log });
        if (o.json) out.kernels = r;
        else process.stdout.write(renderKernelBench(r));
      }
      if (o.layers) {
        const r = await benchLayers({ log, tokens: o.quick ? 4 : 16 });
        if (o.json) out.layers = r;
        else process.stdout.write(renderLayerBench(r));
      }
      if (o.dispatch) {
        const r = await benchDispatch(o.quick ? 100 : 400);
        if (o.json) out.dispatch = r;
        else process.stdout.write(renderDispatch(r));
      }
      if (o.json) process.stdout.write(JSON.stringify(out, null, 2) + '\n');
    });
}
