/**
 * Dev only: regenerate test/golden/ from the Python reference. Needs Debian's python3-torch:
 *   npm run build && node dist/tools/make-goldens.js
 */
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GOLDEN_CASES } from '../test/fixtures.js';
import { ROOT, containerDigest, goldenDir } from '../test/helpers.js';

for (const c of GOLDEN_CASES) {
  const dir = goldenDir(c);
  const out = path.join(ROOT, 'test', 'golden', `${c.name}.bin`);
  execFileSync('/usr/bin/python3', [path.join(ROOT, 'tools', 'reference', 'kimi_linear_ref.py'), dir, '--ids', c.ids.join(','), '--out', out], {
    stdio: 'inherit',
  });
  const meta = { name: c.name, ids: c.ids, containerSha256: containerDigest(dir), reference: `tools/reference/kimi_linear_ref.py (float64) on a ${c.checkpoint ? 'HuggingFace checkpoint' : 'container'}` };
  fs.writeFileSync(path.join(ROOT, 'test', 'golden', `${c.name}.json`), JSON.stringify(meta, null, 2) + '\n');
  console.log(`${c.name}: ${fs.statSync(out).size} bytes`);
}
