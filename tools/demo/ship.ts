/**
 * Dev only: turn the trained demo model into what the package ships, and measure it.
 *   npm run build && node dist/tools/demo/ship.js [HF_DIR] [WORK_DIR]     (defaults /work/demo/hf, /work/demo)
 *
 * 1. `waste convert HF_DIR models/demo` (VQ3R experts, Q4G trunk, Q8G embedding and head) and, for
 *    comparison, WORK_DIR/demo-q8 (--trunk-bits 8) and WORK_DIR/demo-f16 (--trunk-bits 16);
 * 2. `waste quality` of each against the f32 checkpoint over the held-out text (WORK_DIR/data/heldout.txt);
 * 3. models/demo/heldout-sample.txt (the start of the held-out text) and models/demo/reference.json:
 *    the f32 checkpoint's and the container's perplexity on it, which test/demo-model.test.ts checks;
 * 4. sample generations; everything in WORK_DIR/quality.json for docs/QUALITY.md.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { convert } from '../../src/convert/convert.js';
import { Model } from '../../src/api/model.js';
import { perplexity } from '../../src/quality/perplexity.js';
import { measureQuality, type QualityReport } from '../../src/quality/quality.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
const hf = path.resolve(process.argv[2] ?? '/work/demo/hf');
const work = path.resolve(process.argv[3] ?? '/work/demo');
const shipped = path.join(ROOT, 'models', 'demo');
const log = (s: string) => console.log(s);

/** The test's sample: windows of SAMPLE_CTX tokens, SAMPLE_WINDOWS of them. */
const SAMPLE_CTX = 256;
const SAMPLE_WINDOWS = 8;
/** Held-out windows for the quality report. */
const CTX = 512;
const WINDOWS = Number(process.env.DEMO_QUALITY_WINDOWS ?? 48);
/** The stated margin: the container's held-out perplexity stays within this factor of the f32 model's. */
const MARGIN = 1.1;

const variants = [
  { name: 'VQ3R experts, Q4G trunk, Q8G embedding and head (shipped)', dir: shipped, trunkBits: 4 as const },
  { name: 'VQ3R experts, all-Q8G trunk', dir: path.join(work, 'demo-q8'), trunkBits: 8 as const },
  { name: 'VQ3R experts, F16 trunk', dir: path.join(work, 'demo-f16'), trunkBits: 16 as const },
];

for (const v of variants) {
  log(`converting ${hf} → ${v.dir} (trunk bits ${v.trunkBits})`);
  const r = await convert(hf, v.dir, { trunkBits: v.trunkBits, force: true, log });
  log(`  ${r.seconds.toFixed(1)} s, ${(dirBytes(v.dir) / 1e6).toFixed(2)} MB`);
}
// the shipped container has no resumable-job leftovers or usage file
for (const f of fs.readdirSync(shipped)) if (f === 'usage.waste') fs.rmSync(path.join(shipped, f));

const heldText = fs.readFileSync(path.join(work, 'data', 'heldout.txt'), 'utf8');
const reference = await Model.open(hf);
const container = await Model.open(shipped);
const heldIds = container.tokenize(heldText);

// the test's sample: whole lines from the start of the held-out text, enough for its windows
const need = SAMPLE_CTX * SAMPLE_WINDOWS;
let end = 0;
while (container.tokenize(heldText.slice(0, end)).length < need) end = heldText.indexOf('\n', end + 1) + 1 || heldText.length;
const sample = heldText.slice(0, end);
fs.writeFileSync(path.join(shipped, 'heldout-sample.txt'), sample);
const sampleIds = container.tokenize(sample);
const pRef = await perplexity(reference, sampleIds, { ctx: SAMPLE_CTX, windows: SAMPLE_WINDOWS });
const pQ = await perplexity(container, sampleIds, { ctx: SAMPLE_CTX, windows: SAMPLE_WINDOWS });
const ref = {
  sample: 'heldout-sample.txt',
  ctx: SAMPLE_CTX,
  windows: SAMPLE_WINDOWS,
  perplexity: { f32: pRef.perplexity, container: pQ.perplexity },
  margin: MARGIN,
  note: 'held-out perplexity on the sample, scored as `waste quality` scores (second half of each window); the container must stay within margin × the f32 model',
};
fs.writeFileSync(path.join(shipped, 'reference.json'), JSON.stringify(ref, null, 2) + '\n');
log(`sample: f32 perplexity ${pRef.perplexity.toFixed(3)}, container ${pQ.perplexity.toFixed(3)}`);

// what `waste run` does (the model's generation_config.json, seed 0), and plain greedy decoding
const samples: { prompt: string; sampling: string; text: string }[] = [];
const modes = [
  ['generation_config.json (temperature 0.7, top-p 0.9, repetition penalty 1.15), seed 0', {}],
  ['greedy', { temperature: 0, repetitionPenalty: 1 }],
] as const;
for (const prompt of ['It was a dark', 'Call me Ishmael.', 'The state of the Union is', 'The whale']) {
  for (const [sampling, opts] of modes) {
    const chat = container.chat();
    let text = '';
    for await (const piece of chat.send(prompt, { maxTokens: 80, ...opts })) text += piece;
    chat.close();
    samples.push({ prompt, sampling, text });
    log(`> ${prompt} (${sampling})\n${text}\n`);
  }
}
await reference.close();
await container.close();

const reports: (QualityReport & { name: string; megabytes: number })[] = [];
for (const v of variants) {
  log(`quality: ${v.name}`);
  const q = await measureQuality(hf, v.dir, heldIds, { ctx: CTX, windows: WINDOWS });
  reports.push({ ...q, name: v.name, megabytes: dirBytes(v.dir) / 1e6 });
  log(`  KL ${q.kl.mean.toFixed(4)} ± ${q.kl.stderr.toFixed(4)}, top-1 ${(100 * q.top1).toFixed(1)} %, perplexity f32 ${q.perplexity.reference.toFixed(3)} → ${q.perplexity.container.toFixed(3)}`);
}
fs.writeFileSync(path.join(work, 'quality.json'), JSON.stringify({ heldoutTokens: heldIds.length, sample: ref, samples, reports }, null, 2) + '\n');
log(`wrote ${path.join(work, 'quality.json')}`);

function dirBytes(dir: string): number {
  return fs.readdirSync(dir).reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
}
