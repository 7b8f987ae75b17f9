/** `opts` over `defaults`: a key the caller left undefined takes the model's value. */
export function withDefaults<T extends object>(defaults: Partial<T>, opts: T): T {
  const out = { ...defaults } as T;
  for (const [k, v] of Object.entries(opts)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
