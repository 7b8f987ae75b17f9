/**
 * Give the event loop a turn. The kernels compute on the calling thread and the forward pass
 * awaits nothing that leaves it, so without this a generation would hold the process for its
 * whole length: no timer fires, no signal or keypress is handled, no socket is read or written.
 * `setImmediate` (not a microtask) lets timers, I/O and signals run before the next token.
 */
export const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
