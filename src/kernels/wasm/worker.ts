import { parentPort, workerData } from 'node:worker_threads';
import { C, CMD_ATTACH, CMD_EXIT, type WorkerInit, TMP_BASE, TMP_STRIDE, takeChunks } from './pool.js';
import { type KernelExports, PARALLEL_KERNELS, instantiate } from './module.js';
import { collectGarbage } from '../../memory/collect.js';

// A helper thread of the kernel pool: waits for a job in the control block, takes chunks of its
// rows until none is left, and counts itself done.
const init = workerData as WorkerInit;
const ctrl = new Int32Array(init.ctrl);
const args = new Float64Array(init.args);
const instances = new Map<number, KernelExports>();
for (const m of init.memories) instances.set(m.id, instantiate(init.module, m.memory));
// the instances are the only handles kept: a detached memory must be collectable
init.memories = [];
let seen = Atomics.load(ctrl, C.SEQ);

function done(): void {
  if (Atomics.sub(ctrl, C.PENDING, 1) === 1) Atomics.notify(ctrl, C.PENDING);
}

function loop(): void {
  const spin = ctrl[C.SPIN];
  for (;;) {
    for (let i = 0; i < spin && Atomics.load(ctrl, C.SEQ) === seen; i++);
    if (Atomics.load(ctrl, C.SEQ) === seen) {
      Atomics.add(ctrl, C.SLEEPING, 1);
      while (Atomics.load(ctrl, C.SEQ) === seen) Atomics.wait(ctrl, C.SEQ, seen);
      Atomics.sub(ctrl, C.SLEEPING, 1);
    }
    seen = Atomics.load(ctrl, C.SEQ);
    const cmd = ctrl[C.CMD];
    if (cmd === CMD_EXIT) return;
    if (cmd === CMD_ATTACH) return; // back to the event loop; the attach message resumes the loop
    try {
      const parts = ctrl[C.PARTS];
      if (init.index < parts) {
        const ex = instances.get(ctrl[C.ARENA]);
        if (!ex) throw new Error(`arena ${ctrl[C.ARENA]} is not attached`);
        const fn = ex[PARALLEL_KERNELS[ctrl[C.KERNEL]]] as (...x: number[]) => void;
        const n = ctrl[C.NARGS];
        const a: number[] = new Array(n + 3);
        for (let i = 0; i < n; i++) a[i] = args[i];
        a[n] = args[TMP_BASE] + init.index * args[TMP_STRIDE];
        takeChunks(ctrl, (b, e) => {
          a[n + 1] = b;
          a[n + 2] = e;
          fn(...a);
        });
      }
    } catch {
      Atomics.store(ctrl, C.ERROR, 1);
    }
    done();
  }
}

parentPort!.on('message', (msg: { type: string; id: number; memory: WebAssembly.Memory }) => {
  if (msg.type === 'attach') instances.set(msg.id, instantiate(init.module, msg.memory));
  else if (msg.type === 'detach') {
    instances.delete(msg.id);
    collectGarbage();
  } else return;
  done();
  loop();
});

Atomics.add(ctrl, C.READY, 1);
loop();
