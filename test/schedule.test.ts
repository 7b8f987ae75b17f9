import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { schedule } from '../src/pull/schedule.js';

describe('the streaming schedule', () => {
  // four shards of 10 bytes, one MoE layer each, no trunk; then one layer straddling two shards
  const one = [0, 1, 2, 3].map((l) => ({ file: `s${l}`, bytes: 10, trunkBytes: 0, layers: [l] }));
  it('deletes each shard once its layers are converted; the peak counts the shard downloading ahead', () => {
    const inTurn = schedule(one);
    assert.deepEqual([...inTurn.spentAfter.values()], [['s0'], ['s1'], ['s2'], ['s3']]);
    assert.equal(inTurn.peakSourceBytes, 10);
    assert.equal(schedule(one, 1).peakSourceBytes, 20);
    assert.equal(schedule(one, 1).totalSourceBytes, 40);
  });
  it('keeps a shard until the last layer it holds experts of is converted, with trunk copies counted', () => {
    const straddle = [
      { file: 'a', bytes: 10, trunkBytes: 2, layers: [0] },
      { file: 'b', bytes: 10, trunkBytes: 0, layers: [0, 1] },
      { file: 'c', bytes: 10, trunkBytes: 3, layers: [2] },
      { file: 'd', bytes: 10, trunkBytes: 0, layers: [3] },
    ];
    const s = schedule(straddle, 1);
    assert.deepEqual(s.ready.get('b'), [0, 1]);
    assert.deepEqual(s.spentAfter.get('a'), []);
    assert.deepEqual(s.spentAfter.get('b'), ['a', 'b']);
    // at b: a, b and c (downloading) with a's trunk copy
    assert.equal(s.peakSourceBytes, 32);
    assert.equal(schedule(straddle).peakSourceBytes, 22);
  });
});
