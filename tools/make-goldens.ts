/**
 * Dev only: regenerate test/golden/ from the Python reference. Needs Debian's python3-torch:
 *   npm run build && node dist/tools/make-goldens.js [CASE]
 * A container case (one with Q8G/Q4G products) also gets the reference with the engine's 16-bit
 * activation rounding: CASE.a16.bin (the logits) and CASE.a16-products.bin (the first positions'
 * inputs and float64 a16 outputs of every Q8G/Q4G product, listed in CASE.json's `a16`).
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN_CASES } from '../test/fixtures.js';
import { ROOT, containerDigest, goldenDir, testPicture } from '../test/helpers.js';
import { toPatches } from '../src/image/preprocess.js';
import { readVisionConfig } from '../src/model/kimi/vision/config.js';

/** Positions whose product inputs and outputs CASE.a16-products.bin keeps (the first, and one with attention state). */
const A16_POSITIONS = 2;

/** The reference that computes a model directory's family: Kimi's own, or the other MoE families'. */
function referenceOf(dir: string): string {
  const file = fs.existsSync(path.join(dir, 'config.json')) ? path.join(dir, 'config.json') : path.join(dir, 'manifest.json');
  const doc = JSON.parse(fs.readFileSync(file, 'utf8')) as { model_type?: string; config?: { model_type?: string } };
  const type = doc.config?.model_type ?? doc.model_type ?? 'kimi_linear';
  return type === 'kimi_linear' || type === 'kimi_k3' ? 'kimi_linear_ref.py' : 'moe_ref.py';
}

const only = process.argv[2];
for (const c of GOLDEN_CASES) {
  if (only && c.name !== only) continue;
  const dir = goldenDir(c);
  const out = path.join(ROOT, 'test', 'golden', `${c.name}.bin`);
  if (c.image) {
    // the pixels as our preprocessing cuts them (checked bit for bit against the C engine's outside the repo); the tower and the text model from the reference
    const spec = readVisionConfig(dir, c.checkpoint ? 'checkpoint' : 'container')!;
    const p = toPatches(testPicture(c.image.width, c.image.height, c.image.seed), spec);
    const px = path.join(dir, 'pixels.bin');
    fs.writeFileSync(px, new Uint8Array(p.pixels.buffer));
    const ids = path.join(dir, 'ids.txt');
    fs.writeFileSync(ids, c.ids.join(','));
    execFileSync('/usr/bin/python3', [path.join(ROOT, 'tools', 'reference', 'kimi_k3_vision.py'), 'logits', dir, ids, out, '--image', px, String(p.gh), String(p.gw)], { stdio: 'inherit' });
    fs.rmSync(px);
    fs.rmSync(ids);
  } else
    execFileSync('/usr/bin/python3', [path.join(ROOT, 'tools', 'reference', referenceOf(dir)), dir, '--ids', c.ids.join(','), '--out', out], {
      stdio: 'inherit',
    });
  let a16: { reference: string; products: unknown } | undefined;
  if (!c.image && !c.checkpoint && referenceOf(dir) === 'kimi_linear_ref.py') {
    const base = path.join(ROOT, 'test', 'golden', c.name);
    const products = `${base}.a16-products.bin`;
    execFileSync('/usr/bin/python3', [path.join(ROOT, 'tools', 'reference', 'kimi_linear_ref.py'), dir, '--ids', c.ids.join(','), '--out', `${base}.a16.bin`, '--activations', 'a16', '--products', products, '--positions', String(A16_POSITIONS)], {
      stdio: 'inherit',
    });
    a16 = { reference: `tools/reference/kimi_linear_ref.py --activations a16 (float64, the inputs of Q8G/Q4G products rounded as the engine's a16) on a container`, products: JSON.parse(fs.readFileSync(`${products}.json`, 'utf8')) };
    fs.rmSync(`${products}.json`);
  }
  const meta = { name: c.name, ids: c.ids, containerSha256: containerDigest(dir), reference: `tools/reference/${c.image ? 'kimi_k3_vision.py logits' : referenceOf(dir)} (float64) on a ${c.checkpoint ? 'HuggingFace checkpoint' : 'container'}`, ...(a16 ? { a16 } : {}) };
  fs.writeFileSync(path.join(ROOT, 'test', 'golden', `${c.name}.json`), JSON.stringify(meta, null, 2) + '\n');
  console.log(`${c.name}: ${fs.statSync(out).size} bytes`);
}
