/**
 * The folder order of docs/ARCHITECTURE.md ("How the code is laid out"): no source file imports
 * from a folder above its own, and none is allowed to.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { ROOT } from './helpers.js';

const ORDER: string[][] = [
  ['cli', 'server', 'bench', 'index.ts'],
  ['pull'],
  ['convert', 'quality', 'synth', 'quant'],
  ['api'],
  ['generate'],
  ['engine'],
  ['store'],
  ['model'],
  ['chat'],
  ['constrain'],
  ['experts', 'kernels'],
  ['container', 'checkpoint', 'tokenizer', 'image', 'gguf'],
  ['core'],
  ['memory'],
  ['util', 'types', 'version.ts'],
];
const ALLOWED = new Set<string>();

function* sources(dir: string): Generator<string> {
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) yield* sources(p);
    else if (e.name.endsWith('.ts')) yield p;
  }
}

/**
 * Inside src/model: the registry over the families (one folder each, never importing each other),
 * which sit over the shared base (the chunk loop, the binder) and the shared blocks (attention,
 * FFN, MoE, routers, rotary embeddings), which know no family.
 */
const FAMILIES = ['kimi', 'qwen3-moe', 'mixtral', 'olmoe', 'gpt-oss', 'deepseek', 'glm4-moe', 'qwen3-next'];
const MODEL_ORDER: string[][] = [['registry.ts'], FAMILIES, ['transformer'], ['base', 'blocks'], ['media.ts'], ['sources', 'architecture.ts', 'synth.ts', 'release.ts']];
/** Folders of one rank that must not import each other either. */
const APART = new Set([
  'experts→kernels',
  'kernels→experts',
  'base→blocks',
  'blocks→base',
  ...FAMILIES.flatMap((a) => FAMILIES.filter((b) => b !== a).map((b) => `${a}→${b}`)),
]);

/** Every module a file imports or re-exports, statically or dynamically, and side-effect imports. */
function specifiers(text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)(['"])(\.[^'"]+)\1/gm)) out.push(m[2]);
  return out;
}

function violations(root: string, order: string[][], apart: Set<string>, allowed: Set<string>): { up: string[]; unknown: string[] } {
  const rank = new Map<string, number>();
  order.forEach((g, i) => g.forEach((f) => rank.set(f, i)));
  const up: string[] = [];
  const unknown = new Set<string>();
  for (const file of sources(root)) {
    const from = path.relative(root, file).split(path.sep)[0];
    for (const spec of specifiers(fs.readFileSync(file, 'utf8'))) {
      const rel = path.relative(root, path.resolve(path.dirname(file), spec));
      if (rel.startsWith('..')) continue;
      const target = rel.split(path.sep)[0].replace(/\.js$/, '.ts');
      if (target === from) continue;
      for (const f of [from, target]) if (!rank.has(f)) unknown.add(f);
      const edge = `${from}→${target}`;
      if (((rank.get(target) ?? 99) < (rank.get(from) ?? 99) || apart.has(edge)) && !allowed.has(edge)) up.push(`${path.relative(ROOT, file)} imports ${spec}`);
    }
  }
  return { up, unknown: [...unknown] };
}

/** Folders (or top-level files) of `root` that reach back to themselves through imports between folders. */
function cycles(root: string): string[] {
  const edges = new Map<string, Set<string>>();
  for (const file of sources(root)) {
    const from = path.relative(root, file).split(path.sep)[0];
    for (const spec of specifiers(fs.readFileSync(file, 'utf8'))) {
      const rel = path.relative(root, path.resolve(path.dirname(file), spec));
      if (rel.startsWith('..')) continue;
      const target = rel.split(path.sep)[0].replace(/\.js$/, '.ts');
      if (target !== from) edges.set(from, (edges.get(from) ?? new Set()).add(target));
    }
  }
  const found: string[] = [];
  for (const start of edges.keys()) {
    // a walk from each folder: does any path lead back to it?
    const seen = new Set<string>();
    const stack = [...(edges.get(start) ?? [])];
    while (stack.length) {
      const f = stack.pop()!;
      if (f === start) {
        found.push(start);
        break;
      }
      if (seen.has(f)) continue;
      seen.add(f);
      stack.push(...(edges.get(f) ?? []));
    }
  }
  return found.sort();
}

describe('the layout', () => {
  it('reads every form of import', () => {
    assert.deepEqual(specifiers(`import { a } from '../x.js';\nimport '../side.js';\nconst m = await import('../lazy.js');\nexport type { T } from "../types.js";\nexport * from './all.js';`), ['../x.js', '../side.js', '../lazy.js', '../types.js', './all.js']);
  });

  it('no import points up the folder order', () => {
    const { up, unknown } = violations(path.join(ROOT, 'src'), ORDER, APART, ALLOWED);
    assert.deepEqual(unknown, [], 'folders the order does not place');
    assert.deepEqual(up, []);
  });

  it('no folder imports itself through others (no cycle between folders), in src and in src/model', () => {
    assert.deepEqual(cycles(path.join(ROOT, 'src')), []);
    assert.deepEqual(cycles(path.join(ROOT, 'src', 'model')), []);
  });

  it('inside src/model, no architecture imports another, and the shared base imports neither', () => {
    const { up, unknown } = violations(path.join(ROOT, 'src', 'model'), MODEL_ORDER, APART, new Set());
    assert.deepEqual(unknown, [], 'entries of src/model the order does not place');
    assert.deepEqual(up, []);
  });
});
