/**
 * The folder order of docs/ARCHITECTURE.md ("How the code is laid out"): no source file imports
 * from a folder above its own. The one exception the document names — the engine's conveniences
 * that use the generation loop — is the only one allowed.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { ROOT } from './helpers.js';

const ORDER: string[][] = [
  ['cli', 'server', 'bench', 'index.ts'],
  ['convert', 'quality', 'synth', 'quant'],
  ['generate', 'constrain'],
  ['engine'],
  ['store'],
  ['model'],
  ['experts', 'kernels'],
  ['container', 'checkpoint', 'tokenizer'],
  ['core'],
  ['memory'],
  ['util', 'types', 'version.ts'],
];
const ALLOWED = new Set(['engine→generate']);

function* sources(dir: string): Generator<string> {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) yield* sources(p);
    else if (e.name.endsWith('.ts')) yield p;
  }
}

describe('the layout', () => {
  it('no import points up the folder order', () => {
    const src = path.join(ROOT, 'src');
    const rank = new Map<string, number>();
    ORDER.forEach((g, i) => g.forEach((f) => rank.set(f, i)));
    const up: string[] = [];
    const unknown = new Set<string>();
    for (const file of sources(src)) {
      const from = path.relative(src, file).split(path.sep)[0];
      for (const m of fs.readFileSync(file, 'utf8').matchAll(/from '(\.[^']+)'/g)) {
        const target = path.relative(src, path.resolve(path.dirname(file), m[1])).split(path.sep)[0].replace(/\.js$/, '.ts');
        if (target === from) continue;
        for (const f of [from, target]) if (!rank.has(f)) unknown.add(f);
        if ((rank.get(target) ?? 99) < (rank.get(from) ?? 99) && !ALLOWED.has(`${from}→${target}`)) up.push(`${path.relative(ROOT, file)} imports ${m[1]}`);
      }
    }
    assert.deepEqual([...unknown], [], 'folders the order does not place');
    assert.deepEqual(up, []);
  });
});
