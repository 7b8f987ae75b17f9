import { WasteError } from '../../util/errors.js';
import { isObject } from '../../util/fields.js';

/**
 * The release renderer's two rewrites of a conversation before it is written (as
 * `encoding_k3.py` does them; the caller's objects are never changed).
 */

type Obj = Record<string, unknown>;

/**
 * A tool call's arguments as XTML writes them: an object becomes typed `argument` children; a
 * string is parsed, and one that is not JSON at all is kept verbatim for a `json` child (a model
 * that wrote broken JSON sees back what it wrote, not a repair). A string holding JSON that is not
 * an object has no XTML shape and is refused.
 */
export function normalizeArguments(args: unknown, at: string): { args: Obj; raw?: string } {
  if (args === null || args === undefined) return { args: {} };
  if (isObject(args)) return { args };
  if (typeof args !== 'string') throw new WasteError('E_FORMAT', `${at}: tool call arguments must be an object or a JSON object string`);
  if (!args.trim()) return { args: {} };
  let parsed: unknown;
  try {
    parsed = JSON.parse(args);
  } catch {
    return { args: {}, raw: args };
  }
  if (!isObject(parsed)) throw new WasteError('E_FORMAT', `${at}: tool call arguments must be a JSON object`);
  return { args: parsed };
}

/** An assistant's calls by id: the 1-based position of each (every entry counts, id or not) and its function's name; a repeated id keeps its first call. */
function callIndex(calls: unknown): Map<string, { position: number; name: unknown }> {
  const index = new Map<string, { position: number; name: unknown }>();
  if (!Array.isArray(calls)) return index;
  calls.forEach((c, i) => {
    if (!isObject(c) || c.id === undefined || c.id === null) return;
    const key = String(c.id);
    if (index.has(key)) return;
    index.set(key, { position: i + 1, name: isObject(c.function) ? c.function.name : c.name });
  });
  return index;
}

/**
 * XTML numbers tool results by where they stand, so their order is what binds them to the calls;
 * an OpenAI client binds by `tool_call_id` and may send them in any order. Each run of tool
 * messages is matched against the latest assistant's calls and put in call order, each result's
 * `tool` (and `name`, when it has one) set to its call's function. A run that does not match in
 * full is left as it is rather than half sorted.
 */
export function resortToolResults(messages: readonly unknown[]): unknown[] {
  const out: unknown[] = [];
  let current = new Map<string, { position: number; name: unknown }>();
  for (let i = 0; i < messages.length; ) {
    const m = messages[i];
    if (isObject(m) && m.role === 'assistant') {
      current = m.tool_calls ? callIndex(m.tool_calls) : new Map();
      out.push(m);
      i++;
      continue;
    }
    if (!isObject(m) || m.role !== 'tool') {
      out.push(m);
      i++;
      continue;
    }
    const run: { position: number | undefined; offset: number; message: Obj; name: unknown }[] = [];
    let unresolved = false;
    for (let offset = 0; i < messages.length && isObject(messages[i]) && (messages[i] as Obj).role === 'tool'; i++, offset++) {
      const t = messages[i] as Obj;
      const id = 'tool_call_id' in t ? t.tool_call_id : t.id;
      const hit = id === undefined || id === null ? undefined : current.get(String(id));
      if (!hit) unresolved = true;
      run.push({ position: hit?.position, offset, message: t, name: hit?.name });
    }
    if (unresolved) {
      for (const r of run) out.push(r.message);
      continue;
    }
    run.sort((a, b) => a.position! - b.position! || a.offset - b.offset);
    for (const r of run) {
      if (r.name === undefined || r.name === null) {
        out.push(r.message);
        continue;
      }
      out.push({ ...r.message, tool: r.name, ...('name' in r.message ? { name: r.name } : {}) });
    }
  }
  return out;
}
