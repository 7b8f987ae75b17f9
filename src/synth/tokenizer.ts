const CORPUS =
  'the quick brown fox jumps over the lazy dog and then the dog sleeps in the sun while the fox runs into the forest; ' +
  'hello world, this is a test of the synthetic tokenizer. it is used to check that text in gives text out.';

/**
 * A small tiktoken-style vocabulary for synthetic models: the 256 single bytes, then merges of
 * common English pairs (learned greedily from a fixed sentence, so the same every time), then the
 * family's control tokens (`specialNames`) at the top ids. Enough for text to round-trip and for
 * chat formats to be exercised; the model's weights are random, so its text is not meant to read
 * well.
 */
export function synthVocabulary(vocab: number, specialNames: readonly string[]): { ranks: Uint8Array[]; specials: { id: number; text: string }[] } {
  const nSpecial = Math.min(specialNames.length, Math.max(0, vocab - 256));
  const ranks: Uint8Array[] = [];
  for (let b = 0; b < 256; b++) ranks.push(Uint8Array.of(b));
  // greedy BPE training on the corpus: merge the most frequent adjacent pair, repeat
  let seq: string[] = [...CORPUS];
  const known = new Set<string>(seq);
  while (ranks.length < vocab - nSpecial) {
    const count = new Map<string, number>();
    for (let i = 0; i + 1 < seq.length; i++) {
      const p = seq[i] + '\u0000' + seq[i + 1];
      count.set(p, (count.get(p) ?? 0) + 1);
    }
    let best = '';
    let n = 1;
    for (const [p, c] of count) if (c > n || (c === n && best && p < best)) [best, n] = [p, c];
    if (!best) break;
    const [a, b] = best.split('\u0000');
    const merged = a + b;
    const next: string[] = [];
    for (let i = 0; i < seq.length; i++)
      if (i + 1 < seq.length && seq[i] === a && seq[i + 1] === b) {
        next.push(merged);
        i++;
      } else next.push(seq[i]);
    seq = next;
    if (!known.has(merged)) {
      known.add(merged);
      ranks.push(new Uint8Array(Buffer.from(merged, 'latin1')));
    }
  }
  // The fixed sentence runs out of merges long before a real vocabulary (163,840) is full; the rest
  // gets filler words, so that every id the model can produce has text and every command runs.
  const seen = new Set(ranks.map((r) => Buffer.from(r).toString('latin1')));
  for (let i = 0; ranks.length < vocab - nSpecial; i++) {
    const word = ` ${fillerWord(i)}`;
    if (seen.has(word)) continue;
    seen.add(word);
    ranks.push(new Uint8Array(Buffer.from(word, 'latin1')));
  }
  const base = ranks.length;
  return { ranks, specials: specialNames.slice(0, nSpecial).map((text, i) => ({ id: base + i, text })) };
}

/** The i-th word of a fixed list of lower-case letter strings: a, b, …, z, aa, ab, … */
function fillerWord(i: number): string {
  let w = '';
  for (let n = i + 1; n > 0; n = Math.floor((n - 1) / 26)) w = String.fromCharCode(97 + ((n - 1) % 26)) + w;
  return w;
}
