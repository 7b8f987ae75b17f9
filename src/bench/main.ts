/**
 * `npm run bench -- <what>`: benchmarks print a table (and JSON with --json). They are not tests:
 * they measure ratios side by side in one run, on this machine.
 *   kernels    kernel throughput next to the arena's measured memory read bandwidth
 *   layers     decode with a release's real widths (--shape: any family's real shape, kimi-linear by default), all experts in memory: ms per layer vs the floor
 *              (--activations exact,a16: each mode in turn)
 *   activations  KL divergence of 16-bit activations from exact ones on the demo model's held-out sample (or MODEL, --text FILE, --ctx N, --windows N)
 *   pages      what the first use of a 4 KiB page of arena memory costs (fresh, after a disk read)
 *   dispatch   tiny-model decode with 1 and 2 threads (what the worker pool costs)
 *   convert    conversion throughput on Kimi-Linear shapes (--shape k3: K3's, MXFP4 experts), projected onto the full model
 *   tokenizer  encoding 1 MB of multilingual text, next to the tiktoken package
 *   server     one reply through the library, HTTP JSON and HTTP SSE; free vs schema-enforced decode
 *              (--clients 1,2,4,8: that many clients at once, batching on and off; MODEL, --budget SIZE, --ctx N,
 *              --tokens N per request, --repeat R runs each, medians; --preload: every expert read at open, compute-bound;
 *              --trace TRACE.jsonl: each row's experts from a recorded routing trace, lookahead off)
 *   relaxed    relaxed-SIMD instructions against their defined answers, under each of V8's compilers
 *   lookahead  MODEL: decode streamed with each lookahead depth in turn (--depths 0,1,2 --rounds 3 --tokens N --prompt-tokens N
 *              --cache-slots N --lookahead K --trace FILE --inputs greedy): speed, stalls, bytes wasted, guess precision/recall
 *   warm       MODEL: a learned hotlist's effect on the next open: cold and warm runs alternating (--tokens N --prompt-tokens N
 *              --cache-slots N --rounds N)
 *   trace-lookahead  TRACE.jsonl: how well a real routing trace's layer L predicts layers L+1..L+3 (--guesses K)
 */
import { benchActivations, renderActivationsBench } from './activations.js';
import { benchConvert, renderConvertBench } from './convert.js';
import { benchDispatch, renderDispatch } from './dispatch.js';
import { benchKernels, renderKernelBench } from './kernels.js';
import { benchLayers, renderLayerBench } from './layers.js';
import { benchLookahead, renderLookaheadBench } from './lookahead.js';
import { renderTraceLookahead, traceLookahead } from './trace-lookahead.js';
import { benchWarm, renderWarmBench } from './warm.js';
import { benchPages, renderPageBench } from './pages.js';
import { benchRelaxed, renderRelaxedBench } from './relaxed.js';
import { benchServer, renderServerBench } from './server.js';
import { benchServerClients, clientsJson, renderClientsBench } from './server-clients.js';
import { parseSize } from '../util/size.js';
import { benchTokenizer, renderTokenizerBench } from './tokenizer.js';
import { DEMO_MODEL } from '../store/names.js';
import type { Activations } from '../kernels/types.js';
import { DEFAULT_ACTIVATIONS } from '../engine/options.js';

const args = process.argv.slice(2);
const what = args.find((a) => !a.startsWith('-')) ?? 'kernels';
const json = args.includes('--json');
const quick = args.includes('--quick');
const valueOf = (flag: string): string | undefined => (args.includes(flag) ? args[args.indexOf(flag) + 1] : undefined);
const positional = args.filter((a, i) => !a.startsWith('-') && !(i > 0 && args[i - 1].startsWith('--') && ['--shape', '--activations', '--text', '--ctx', '--windows', '--depths', '--rounds', '--tokens', '--cache-slots', '--lookahead', '--trace', '--inputs', '--budget', '--guesses', '--prompt-tokens', '--clients', '--repeat'].includes(args[i - 1])));

if (what === 'kernels') {
  const r = await benchKernels({ quick, log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderKernelBench(r));
} else if (what === 'layers') {
  const shape = valueOf('--shape') ?? 'kimi-linear';
  const modes = (valueOf('--activations') ?? DEFAULT_ACTIVATIONS).split(',');
  if (!modes.every((m): m is Activations => m === 'exact' || m === 'a16')) throw new Error('--activations takes exact, a16 or exact,a16');
  const r = await benchLayers({ shape, activations: modes, log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderLayerBench(r));
} else if (what === 'activations') {
  const ctx = valueOf('--ctx');
  const windows = valueOf('--windows');
  const r = await benchActivations({ model: positional[1], text: valueOf('--text'), ctx: ctx ? Number(ctx) : undefined, windows: windows ? Number(windows) : undefined, log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderActivationsBench(r));
} else if (what === 'pages') {
  const r = await benchPages({ log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderPageBench(r));
} else if (what === 'dispatch') {
  const r = await benchDispatch();
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderDispatch(r));
} else if (what === 'convert') {
  const r = await benchConvert({ shape: args.includes('--shape') && args[args.indexOf('--shape') + 1] === 'k3' ? 'k3' : 'kimi-linear', log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderConvertBench(r));
} else if (what === 'tokenizer') {
  const r = benchTokenizer();
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderTokenizerBench(r));
} else if (what === 'server' && valueOf('--clients')) {
  const clients = valueOf('--clients')!.split(',').map(Number);
  if (!clients.every((n) => Number.isInteger(n) && n >= 1 && n <= 64)) throw new Error('--clients takes counts from 1 to 64, e.g. 1,2,4,8');
  const budget = valueOf('--budget');
  const r = await benchServerClients({
    model: positional[1] ?? DEMO_MODEL,
    clients,
    tokens: valueOf('--tokens') ? Number(valueOf('--tokens')) : undefined,
    repeat: valueOf('--repeat') ? Number(valueOf('--repeat')) : undefined,
    budget: budget ? parseSize(budget, undefined, '--budget') : undefined,
    preload: args.includes('--preload'),
    routingTrace: valueOf('--trace'),
    open: valueOf('--ctx') ? { maxContext: Number(valueOf('--ctx')) } : undefined,
    log: (s) => process.stderr.write(`${s}\n`),
  });
  process.stdout.write(json ? JSON.stringify(clientsJson(r), null, 2) + '\n' : renderClientsBench(r));
} else if (what === 'server') {
  const r = await benchServer({ model: args.filter((a) => !a.startsWith('-'))[1] ?? DEMO_MODEL, log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderServerBench(r));
} else if (what === 'lookahead') {
  const num = (flag: string) => (valueOf(flag) === undefined ? undefined : Number(valueOf(flag)));
  const r = await benchLookahead(positional[1] ?? DEMO_MODEL, {
    depths: valueOf('--depths')?.split(',').map(Number),
    rounds: num('--rounds'),
    tokens: num('--tokens'),
    promptTokens: num('--prompt-tokens'),
    cacheSlots: num('--cache-slots'),
    budget: num('--budget'),
    lookahead: num('--lookahead'),
    routingTrace: valueOf('--trace'),
    inputs: valueOf('--inputs') === 'greedy' ? 'greedy' : undefined,
    log: (s) => process.stderr.write(`${s}\n`),
  });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderLookaheadBench(r));
} else if (what === 'warm') {
  const num = (flag: string) => (valueOf(flag) === undefined ? undefined : Number(valueOf(flag)));
  const r = await benchWarm(positional[1] ?? DEMO_MODEL, { tokens: num('--tokens'), promptTokens: num('--prompt-tokens'), cacheSlots: num('--cache-slots'), rounds: num('--rounds'), log: (s) => process.stderr.write(`${s}\n`) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderWarmBench(r));
} else if (what === 'trace-lookahead') {
  const file = positional[1] ?? '/work/shared/data/kimi-linear-routing-300.jsonl';
  const r = traceLookahead(file, { guesses: valueOf('--guesses') === undefined ? undefined : Number(valueOf('--guesses')) });
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderTraceLookahead(r));
} else if (what === 'relaxed') {
  const r = benchRelaxed(quick ? 20_000 : 200_000);
  process.stdout.write(json ? JSON.stringify(r, null, 2) + '\n' : renderRelaxedBench(r));
} else {
  process.stderr.write(`unknown benchmark "${what}" (available: kernels, layers, activations, pages, dispatch, convert, tokenizer, server, lookahead, warm, trace-lookahead, relaxed)\n`);
  process.exitCode = 2;
}
