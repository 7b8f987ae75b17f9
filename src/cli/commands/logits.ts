import * as fs from 'node:fs';
import { type Command, Option } from 'commander';
import { Model } from '../../api/model.js';
import { WasteError, fromSystemError } from '../../util/errors.js';
import { parseIds } from '../args.js';
import { type EngineFlags, addEngineOptions, openOptions } from '../engine-options.js';
import { modelOrDemo } from '../default-model.js';
import { type ImageFlags, addImageOptions } from '../image-options.js';
import { type ImageRows, expandPads } from '../../model/media.js';

export function registerLogits(program: Command): void {
  const cmd = addEngineOptions(
    program
      .command('logits')
      .description('run token ids through the model and write the logits as little-endian float32')
      .argument('[model]', 'container directory or model name (default: the demo model), or a HuggingFace checkpoint directory (runs every weight in f32: the reference)')
      .requiredOption('--ids <ids>', 'token ids, e.g. 3,7,11', parseIds)
      .requiredOption('--out <file>', 'output file (vocab_size float32 values per position)')
      .option('--all', 'write the logits of every position, row after row (default: only after the last id)', false)
      .addOption(new Option('--sequential', 'feed the ids one at a time instead of as one prefill').default(false))
      .option('--learn', "save the experts the cache holds afterwards to the container's usage.waste", false)
      .option('--stats', 'print cache and I/O statistics to stderr', false),
  );
  addImageOptions(cmd, "an image: the ids' next <|media_pad|> becomes its rows");
  cmd.action(async (name: string | undefined, o: EngineFlags & ImageFlags & { ids: number[]; out: string; all: boolean; sequential: boolean; learn: boolean; stats: boolean }) => {
    if (o.sequential && o.image.length) throw new WasteError('E_ARG', '--sequential feeds one id at a time; an image is fed whole (leave out --sequential)');
    const model = modelOrDemo(name);
    const m = await Model.open(model, openOptions(o));
    try {
      const images: ImageRows[] = [];
      for (const f of o.image) images.push(await m.encodeImage(f, { route: o.imageRoute }));
      const ids = images.length ? expandPads(o.ids, m.vision!.mediaToken, images) : o.ids;
      if (ids.length > o.ctx) throw new WasteError('E_ARG', `${ids.length} positions${images.length ? ' (the images expanded)' : ''} do not fit a context of ${o.ctx}`);
      const session = m.newSession();
      let logits: Float32Array;
      if (o.sequential) {
        const rows: Float32Array[] = [];
        for (const id of ids) rows.push(await session.forward([id]));
        logits = o.all ? concat(rows) : rows[rows.length - 1];
      } else logits = await session.forward(ids, { allLogits: o.all, images });
      try {
        fs.writeFileSync(o.out, new Uint8Array(logits.buffer, logits.byteOffset, logits.byteLength));
      } catch (e) {
        throw fromSystemError(o.out, e);
      }
      if (o.stats) process.stderr.write(JSON.stringify(m.stats()) + '\n');
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
