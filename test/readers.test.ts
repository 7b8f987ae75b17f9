import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Worker } from 'node:worker_threads';
import { ReaderPool } from '../src/experts/readers.js';
import { Arena } from '../src/memory/arena.js';
import { WasteError } from '../src/util/errors.js';

describe('reader threads', () => {
  it('an arena announced after a reader thread died is one error, not a wait forever', async () => {
    const pool = await ReaderPool.create(2, 4, [new Arena(0)], 0);
    try {
      pool.attach(new Arena(0));
      const w = (pool as unknown as { workers: Worker[] }).workers[0];
      const gone = new Promise((r) => w.once('exit', r));
      await w.terminate();
      await gone;
      assert.throws(
        () => pool.attach(new Arena(0)),
        (e: unknown) => e instanceof WasteError && e.code === 'E_STATE' && /a reader thread has stopped, so the new memory cannot be shared with the readers/.test(e.message),
      );
    } finally {
      await pool.close();
    }
  });
});
