/**
 * An AbortController that also aborts when `parent` does: a caller ends its own work early (a stop
 * string found outside the loop) without owning the signal it was given. `dispose` detaches it, so
 * a signal reused for many calls does not gather listeners.
 */
export function linkedAbort(parent?: AbortSignal): { controller: AbortController; dispose: () => void } {
  const controller = new AbortController();
  if (!parent) return { controller, dispose: () => {} };
  const onAbort = () => controller.abort();
  if (parent.aborted) controller.abort();
  else parent.addEventListener('abort', onAbort, { once: true });
  return { controller, dispose: () => parent.removeEventListener('abort', onAbort) };
}
