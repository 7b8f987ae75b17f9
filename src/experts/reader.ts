import * as fs from 'node:fs';
import { receiveMessageOnPort, workerData } from 'node:worker_threads';
import { collectGarbage } from '../memory/collect.js';
import { crc32 } from '../util/crc32.js';
import { JOB_FIELDS, Q, RING, type ReaderInit, Status } from './readers.js';

// A reader thread (see readers.ts): one synchronous positional read per queued record, straight
// into the cache slot's memory.
const init = workerData as ReaderInit;
const ctrl = new Int32Array(init.ctrl);
const ring = new Int32Array(init.ring);
const status = new Int32Array(init.status);
const jobs = new Float64Array(init.jobs);
const errno = new Int32Array(init.errno);
const memories = new Map(init.memories.map((m) => [m.id, m.memory]));
// the map is the only handle kept: a detached memory must be collectable
init.memories = [];
let epoch = 0;
// an announcement waiting for this thread's acknowledgement learns that none will come
process.on('exit', () => {
  Atomics.add(ctrl, Q.LOST, 1);
  Atomics.notify(ctrl, Q.MEMS_ACK);
});

/** Apply the attach/detach messages waiting on the port, and acknowledge each announcement. */
function syncMemories(): void {
  const now = Atomics.load(ctrl, Q.MEMS);
  if (now === epoch) return;
  let dropped = false;
  for (let m = receiveMessageOnPort(init.port); m; m = receiveMessageOnPort(init.port)) {
    const msg = m.message as { type: string; id: number; memory?: WebAssembly.Memory };
    if (msg.type === 'attach' && msg.memory) memories.set(msg.id, msg.memory);
    else if (msg.type === 'detach') dropped = memories.delete(msg.id) || dropped;
  }
  if (dropped) collectGarbage();
  Atomics.add(ctrl, Q.MEMS_ACK, now - epoch);
  Atomics.notify(ctrl, Q.MEMS_ACK);
  epoch = now;
}

/** The next queued slot: demand reads first, then speculative ones; -1 when told to exit. */
function take(): number {
  for (;;) {
    if (Atomics.load(ctrl, Q.EXIT)) return -1;
    // WORK before MEMS: an announcement made after this load changes WORK, so the wait below returns
    const work = Atomics.load(ctrl, Q.WORK);
    syncMemories();
    for (const [TAIL, HEAD, base] of [
      [Q.TAIL, Q.HEAD, 0],
      [Q.SPEC_TAIL, Q.SPEC_HEAD, RING],
    ]) {
      for (;;) {
        const head = Atomics.load(ctrl, HEAD);
        if (head === Atomics.load(ctrl, TAIL)) break;
        if (Atomics.compareExchange(ctrl, HEAD, head, head + 1) === head) return ring[base + (head % RING)];
      }
    }
    Atomics.wait(ctrl, Q.WORK, work);
  }
}

function finish(slot: number, code: number): void {
  Atomics.store(status, slot, code);
  Atomics.notify(status, slot);
  Atomics.add(ctrl, Q.DONE, 1);
  Atomics.notify(ctrl, Q.DONE);
}

/**
 * One queued read, in a function of its own: its view of the slot's memory dies with the call, so
 * a memory detached while this thread waits for work is not kept alive by the last read's locals.
 */
function serve(slot: number): void {
  const j = slot * JOB_FIELDS;
  const fd = jobs[j];
  const pos = jobs[j + 1];
  const memory = memories.get(jobs[j + 2])!;
  const off = jobs[j + 3];
  const len = jobs[j + 4];
  const dst = new Uint8Array(memory.buffer, off, len);
  let done = 0;
  let code: number = Status.READY;
  try {
    while (done < len) {
      const got = fs.readSync(fd, dst, done, len - done, pos + done);
      if (got <= 0) break;
      done += got;
    }
    if (done !== len) code = Status.ERR_SHORT;
    else if (init.verifyPayloadEnd > 0) {
      const stored = dst[36] | (dst[37] << 8) | (dst[38] << 16) | (dst[39] << 24);
      if (crc32(dst.subarray(48, init.verifyPayloadEnd)) !== stored >>> 0) code = Status.ERR_CRC;
    }
  } catch (e) {
    errno[slot] = -((e as NodeJS.ErrnoException).errno ?? 5);
    code = Status.ERR_IO;
  }
  finish(slot, code);
}

Atomics.add(ctrl, Q.READY, 1);
for (;;) {
  const slot = take();
  if (slot < 0) break;
  serve(slot);
}
