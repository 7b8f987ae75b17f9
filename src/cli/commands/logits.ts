import * as fs from 'node:fs';
import { type Command, Option } from 'commander';
import { Model } from '../../engine.js';
import { WasteError, fromSystemError } from '../../util/errors.js';
import { intArg, parseIds } from '../args.js';

export function registerLogits(program: Command): void {
  program
    .command('logits')
    .description('run token ids through the model and write the logits as little-endian float32')
    .argument('<model>', 'container directory')
    .requiredOption('--ids <ids>', 'token ids, e.g. 3,7,11', parseIds)
    .requiredOption('--out <file>', 'output file (vocab_size float32 values per position)')
    .option('--all', 'write the logits of every position, row after row (default: only after the last id)', false)
    .option('--verify', 'check the CRC32 of every expert record as it is read', false)
    .option('--ctx <n>', 'context length', intArg(1, 1 << 24), 4096)
    .option('--threads <n>', 'compute threads (default: one per core)', intArg(1, 256))
    .addOption(new Option('--kernels <impl>', 'kernel implementation').choices(['wasm', 'typescript']).default('wasm'))
    .addOption(new Option('--sequential', 'feed the ids one at a time instead of as one prefill').default(false))
    .action(async (model: string, o: { ids: number[]; out: string; all: boolean; verify: boolean; ctx: number; sequential: boolean; threads?: number; kernels: 'wasm' | 'typescript' }) => {
      if (o.ids.length > o.ctx) throw new WasteError('E_ARG', `${o.ids.length} ids do not fit a context of ${o.ctx}`);
      const m = await Model.open(model, { verify: o.verify, threads: o.threads, kernels: o.kernels, maxContext: o.ctx });
      try {
        const session = m.newSession();
        let logits: Float32Array;
        if (o.sequential) {
          const rows: Float32Array[] = [];
          for (const id of o.ids) rows.push(await session.forward([id]));
          logits = o.all ? concat(rows) : rows[rows.length - 1];
        } else logits = await session.forward(o.ids, { allLogits: o.all });
        try {
          fs.writeFileSync(o.out, new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
        } catch (e) {
          throw fromSystemError(o.out, e);
        }
      } finally {
        await m.close();
      }
    });
}

function concat(rows: Float32Array[]): Float32Array {
  const out = new Float32Array(rows.reduce((s, r) => s + r.length, 0));
  let o = 0;
  for (const r of rows) {
    out.set(r, o);
    o += r.length;
  }
  return out;
}
