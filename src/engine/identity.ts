import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fromSystemError } from '../util/errors.js';
import { openRegular } from '../util/read.js';

/**
 * A digest that tells models apart for saved sessions. A container: its manifest (shapes, formats,
 * offsets), its codebooks and the start and size of its trunk — two conversions of one checkpoint
 * with different seeds differ there. A checkpoint: its config and its safetensors headers.
 */
export function modelIdentity(dir: string, kind: 'container' | 'checkpoint'): Uint8Array {
  const h = crypto.createHash('sha256');
  h.update(`waste model ${kind}\n`);
  const add = (file: string, limit = Infinity) => {
    const f = path.join(dir, file);
    if (!fs.existsSync(f)) return;
    const { fd, size } = openRegular(f);
    try {
      const n = Math.min(size, limit);
      const buf = Buffer.alloc(n);
      try {
        fs.readSync(fd, buf, 0, n, 0);
      } catch (e) {
        throw fromSystemError(f, e);
      }
      h.update(`${file} ${size}\n`);
      h.update(buf);
    } finally {
      fs.closeSync(fd);
    }
  };
  if (kind === 'container') {
    add('manifest.json');
    add('codebooks.bin');
    add('trunk.bin', 1 << 16);
  } else {
    add('config.json');
    add('model.safetensors.index.json');
    for (const f of fs.readdirSync(dir).filter((f) => f.endsWith('.safetensors')).sort()) {
      // the header (its length prefix and JSON) names every tensor, its dtype, shape and offsets
      const { fd } = openRegular(path.join(dir, f));
      try {
        const len = Buffer.alloc(8);
        fs.readSync(fd, len, 0, 8, 0);
        const n = Math.min(Number(len.readBigUInt64LE(0)), 256 << 20);
        const head = Buffer.alloc(n);
        fs.readSync(fd, head, 0, n, 8);
        h.update(`${f}\n`);
        h.update(head);
        // and the first weights, so re-trained weights under the same header differ
        const first = Buffer.alloc(4096);
        const got = fs.readSync(fd, first, 0, 4096, 8 + n);
        h.update(first.subarray(0, got));
      } finally {
        fs.closeSync(fd);
      }
    }
  }
  return new Uint8Array(h.digest());
}
