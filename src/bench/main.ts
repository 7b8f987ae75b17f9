/**
 * `npm run bench -- <what>`: benchmarks print a table (and JSON with --json). They are not tests:
 * they measure ratios side by side in one run, on this machine.
 *   kernels    kernel throughput next to the arena's measured memory read bandwidth
 */
import { benchKernels, renderKernelBench } from './kernels.js';

const args = process.argv.slice(2);
const what = args.find((a) => !a.startsWith('-')) ?? 'kernels';
const json = args.includes('--json');
const quick = args.includes('--quick');

if (what === 'kernels') {
  const r = await benchKernels({ quick, log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderKernelBench(r));
} else {
  process.stderr.write(`unknown benchmark "${what}" (available: kernels)\n`);
  process.exitCode = 2;
}
