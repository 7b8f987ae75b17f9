/**
 * Dev only: the wall time of `waste pull` with the download overlapping the conversion (the
 * default) against fetching and converting in turn (`overlap: false`), from a local hub with a
 * capped rate, interleaved A B A B … (medians; the host may be shared, so only the ratio means much):
 *   npm run build && node dist/tools/pull/overlap.js [--rounds 3] [--shards 8] [--layers 8] [--rate BYTES_PER_S] [--threads 1]
 * Without --rate the cap is the checkpoint's size over one in-turn conversion's time, so that the
 * download and the conversion take about as long (where overlap can save most: up to half).
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from 'node:worker_threads';
import { convert } from '../../src/convert/convert.js';
import { pull } from '../../src/pull/pull.js';
import { writeSyntheticCheckpoint } from '../../src/synth/checkpoint.js';

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const rounds = arg('rounds', 3);
const shards = arg('shards', 8);
const layers = arg('layers', 8);
const threads = arg('threads', 1);
const REPO = 'bench-org/overlap';

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'pull2-bench-'));
try {
  const src = path.join(scratch, 'src');
  writeSyntheticCheckpoint(src, {
    shape: 'tiny',
    seed: 7,
    shards,
    config: { num_hidden_layers: layers, hidden_size: 512, vocab_size: 512, intermediate_size: 768, moe_intermediate_size: 256, kv_lora_rank: 64, linear_attn_config: { num_heads: 4, head_dim: 64 } },
  });
  const bytes = fs.readdirSync(src).reduce((a, f) => a + fs.statSync(path.join(src, f)).size, 0);
  let t = performance.now();
  await convert(src, path.join(scratch, 'ref'), { threads });
  const convertS = (performance.now() - t) / 1000;
  const rate = arg('rate', Math.round(bytes / convertS));
  console.log(`checkpoint ${(bytes / 1e6).toFixed(1)} MB in ${shards} shards, ${layers} layers; waste convert ${convertS.toFixed(2)} s (threads ${threads}); hub capped at ${(rate / 1e6).toFixed(2)} MB/s (download alone ≈ ${(bytes / rate).toFixed(2)} s)`);

  const hubThread = new Worker(new URL('./hub-thread.js', import.meta.url), { workerData: { repo: REPO, dir: src, bytesPerSecond: rate } });
  const { url } = await new Promise<{ url: string }>((r) => hubThread.once('message', r));
  const times: Record<'overlap' | 'in turn', number[]> = { overlap: [], 'in turn': [] };
  const digests = new Set<string>();
  for (let r = 0; r < rounds; r++) {
    for (const mode of ['overlap', 'in turn'] as const) {
      const home = path.join(scratch, `home-${r}-${mode.replace(' ', '')}`);
      process.env.WASTE_HOME = home;
      t = performance.now();
      const res = await pull(REPO, { threads, overlap: mode === 'overlap', hub: { endpoint: url } });
      const s = (performance.now() - t) / 1000;
      times[mode].push(s);
      digests.add(fs.readdirSync(res.dir).filter((f) => f !== "store.json").sort().map((f) => `${f}:${hashOf(path.join(res.dir, f))}`).join(","));
      console.log(`round ${r + 1} ${mode.padEnd(7)} ${s.toFixed(2)} s`);
      fs.rmSync(home, { recursive: true, force: true });
    }
  }
  const med = (v: number[]) => {
    const s = [...v].sort((a, b) => a - b);
    return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
  };
  const a = med(times.overlap);
  const b = med(times['in turn']);
  console.log(`median: overlap ${a.toFixed(2)} s, in turn ${b.toFixed(2)} s, ratio ${(a / b).toFixed(3)}; containers identical across runs: ${digests.size === 1}`);
  hubThread.postMessage('stop');
  await new Promise((r) => hubThread.once('exit', r));
} finally {
  fs.rmSync(scratch, { recursive: true, force: true });
}

function hashOf(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex').slice(0, 16);
}
