/**
 * `waste bench --layers` projects a whole token of a release from a few of its layers: the layer
 * counts it multiplies by come from the shape's own config, so they must be the releases'.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { benchLayers, fullCounts, layerBenchShapes } from '../src/bench/layers.js';

describe('bench --layers', () => {
  it('takes every family\'s real-width shapes', () => {
    const shapes = layerBenchShapes();
    for (const s of ['kimi-linear', 'k3', 'qwen3-30b-a3b', 'qwen3-235b-a22b']) assert.ok(shapes.includes(s), s);
    assert.ok(!shapes.includes('tiny') && !shapes.includes('qwen3-moe-tiny'), 'test shapes are not releases');
  });

  it('counts each release\'s layers by kind as the release has them', () => {
    assert.deepEqual(fullCounts('kimi-linear'), { head: 1, kda: 20, mla: 7, dense: 1, moe: 26 });
    assert.deepEqual(fullCounts('k3'), { head: 1, kda: 69, mla: 24, dense: 1, moe: 92 });
    assert.deepEqual(fullCounts('qwen3-30b-a3b'), { head: 1, attention: 48, moe: 48 });
    assert.deepEqual(fullCounts('qwen3-coder-480b-a35b'), { head: 1, attention: 62, moe: 62 });
  });

  it('refuses a bench whose layers hold no layer of a kind the release has (its full token could not be projected)', async () => {
    // DeepSeek-V3's first three layers are dense: three layers hold no MoE layer
    await assert.rejects(benchLayers({ shape: 'deepseek-v3', layers: 3, experts: 8, dir: '/nonexistent-bench-dir' }), /3 layers of deepseek-v3 hold no moe layer/);
  });
});
