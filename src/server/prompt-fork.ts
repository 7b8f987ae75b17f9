import type { Session, SessionSnapshot } from '../api/session.js';
import type { CompletionToken } from './completion.js';

/**
 * One prompt for the several choices of a request: the first choice runs it (prefills it, or
 * scores it) and leaves here the session's state after it, and what scoring it gave; each later
 * choice starts from a copy of that state — the same history and logits, so the same reply its seed
 * gives alone — instead of running the prompt again.
 */
export class PromptFork {
  /** The session after the prompt, once the first choice has run it. */
  state?: SessionSnapshot;
  /** The prompt's scored tokens and text, as the first choice gave them out (a completion's echo with logprobs). */
  scored?: { held: CompletionToken[]; piece: string }[];
}

/**
 * Feed a prompt a prefill chunk at a time (as generation feeds one), stopping between chunks when
 * the signal aborts; returns what was left unfed (empty when all of it was fed).
 */
export async function prefill(session: Session, ids: number[], signal: AbortSignal): Promise<number[]> {
  const chunk = Math.max(1, session.prefillChunk);
  for (let i = 0; i < ids.length; i += chunk) {
    if (signal.aborted) return ids.slice(i);
    await session.forward(ids.slice(i, i + chunk));
  }
  return [];
}
