import * as v8 from 'node:v8';
import * as vm from 'node:vm';

let gc: (() => void) | undefined;

/**
 * Run a full garbage collection on this thread, so that a WebAssembly memory it no longer
 * references is unmapped now: a dropped memory is freed only when every thread that ever held it
 * has collected its handle, and an idle thread (a reader asleep in Atomics.wait) may not collect for
 * hours. Node hides `gc` unless started with --expose-gc; setting the flag at run time and taking
 * `gc` from a fresh context is the one way to have it without asking every user for a flag.
 * Measured: a 1 GiB shared memory dropped by the main thread and a worker is back with the OS
 * within ~0.5 s of both collecting, and never without it (docs/LEARNED.md).
 */
export function collectGarbage(): void {
  if (!gc) {
    v8.setFlagsFromString('--expose-gc');
    gc = vm.runInNewContext('gc') as () => void;
  }
  gc();
}
