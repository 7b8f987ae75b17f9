import { randomBytes } from 'node:crypto';

const BASE62 = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/**
 * A tool-call id no other response of any server shares (`call_` and 24 random base-62 characters,
 * 142 bits, as OpenAI's look): clients key tool results by it across a conversation, so ids that
 * restart at call_0 in every response would collide. Used where the model writes no id of its own
 * (Kimi's format has the model write `functions.NAME:INDEX`, which stands as written).
 */
export function newCallId(): string {
  let id = 'call_';
  while (id.length < 29) {
    // 248 = 4 × 62: bytes from 248 up are dropped, so every character is equally likely
    for (const b of randomBytes(32)) if (b < 248 && id.length < 29) id += BASE62[b % 62];
  }
  return id;
}
