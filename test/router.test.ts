/**
 * MoE routers (src/model/blocks/router.ts) against the float64 reference's routing
 * (test/golden/router.json, from tools/reference/router_golden.py): the same experts in the same
 * order, and the same weights to f32 accuracy.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { type RouterConfig, route } from '../src/model/blocks/router.js';
import { ROOT } from './helpers.js';

interface Case {
  name: string;
  config: RouterConfig;
  logits: number[][];
  bias: number[] | null;
  ids: number[][];
  w: number[][];
}
const golden = JSON.parse(fs.readFileSync(path.join(ROOT, 'test', 'golden', 'router.json'), 'utf8')) as { cases: Case[] };

describe('router', () => {
  for (const c of golden.cases)
    it(c.name, () => {
      const K = c.config.topK;
      c.logits.forEach((lg, t) => {
        const ids = new Int32Array(K);
        const w = new Float32Array(K);
        route(c.config, Float32Array.from(lg), ids, w, c.bias ? Float32Array.from(c.bias) : undefined);
        assert.deepEqual([...ids], c.ids[t], `${c.name}, token ${t}: experts`);
        for (let j = 0; j < K; j++) assert.ok(Math.abs(w[j] - c.w[t][j]) <= 2e-7 * Math.max(1, Math.abs(c.w[t][j])), `${c.name}, token ${t}: weight ${j} ${w[j]} against ${c.w[t][j]}`);
      });
    });

  it('the group limit decides: without it other experts win on the same logits', () => {
    const c = golden.cases.find((x) => x.config.groups && x.config.groups.count > 1 && x.config.groups.keep < x.config.groups.count)!;
    const flat: RouterConfig = { ...c.config, groups: undefined };
    let differs = false;
    c.logits.forEach((lg) => {
      const a = new Int32Array(c.config.topK);
      const b = new Int32Array(c.config.topK);
      route(c.config, lg, a, new Float32Array(c.config.topK), c.bias!);
      route(flat, lg, b, new Float32Array(c.config.topK), c.bias!);
      if (a.join() !== b.join()) differs = true;
    });
    assert.ok(differs);
  });
});
