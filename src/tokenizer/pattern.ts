/**
 * Kimi's pre-tokenizer pattern (tokenization_kimi.py), written for JavaScript. The original is in
 * the Rust regex dialect, which differs from JavaScript's in ways that change splits, so each
 * construct is translated to what the Rust engine means, not what it looks like:
 *  - `\p{Han}` is the Han script: `\p{sc=Han}` (not Script_Extensions, so `。` is not Han);
 *  - class intersection `[X&&[^\p{Han}]]` becomes class subtraction `[[X]--\p{sc=Han}]` (the `v` flag);
 *  - `\s` is Unicode White_Space (it includes U+0085 and excludes U+FEFF, unlike JavaScript's `\s`);
 *  - `(?i:'s|'t|…)` folds case the Unicode way, so `'ſ` (long s) matches `'s`; spelled out here.
 * The alternatives, in order: Han runs; words (optional leading non-letter, upper then lower
 * letters, excluding Han, with an English contraction); the same with one or more upper letters
 * first; 1–3 digits; punctuation runs with trailing newlines; whitespace ending in newlines;
 * whitespace not followed by a non-space; whitespace.
 */
const WS = '\\p{White_Space}';
const UPPER = '[[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]--\\p{sc=Han}]';
const LOWER = '[[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]--\\p{sc=Han}]';
const CONTRACTION = "(?:'[sS\\u017F]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?";
const LEAD = '[^\\r\\n\\p{L}\\p{N}]?';

export const KIMI_PATTERN_SOURCE = [
  '\\p{sc=Han}+',
  `${LEAD}${UPPER}*${LOWER}+${CONTRACTION}`,
  `${LEAD}${UPPER}+${LOWER}*${CONTRACTION}`,
  '\\p{N}{1,3}',
  ` ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*`,
  `${WS}*[\\r\\n]+`,
  `${WS}+(?!\\P{White_Space})`,
  `${WS}+`,
].join('|');

/** The pattern as the Rust/Python sources write it (for peers that use the Rust engine). */
export const KIMI_PATTERN_ORIGINAL = [
  '[\\p{Han}]+',
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  '\\p{N}{1,3}',
  ' ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*',
  '\\s*[\\r\\n]+',
  '\\s+(?!\\S)',
  '\\s+',
].join('|');

export function kimiPattern(): RegExp {
  return new RegExp(KIMI_PATTERN_SOURCE, 'gv');
}

/** Python's str.isspace(): White_Space plus the four information separators U+001C–U+001F. */
const PY_SPACE = new RegExp('[\\p{White_Space}\\x1c-\\x1f]', 'v');

/**
 * What tokenization_kimi.py does before tiktoken sees the text: cut it every 400,000 code points,
 * then cut wherever a run of spaces or of non-spaces grows past 25,000 code points. It changes the
 * result only for such long texts or runs; it is reproduced so that ids match the reference there too.
 */
export function* kimiChunks(text: string): Generator<string> {
  const MAX_CHARS = 400_000;
  const MAX_RUN = 25_000;
  if (text.length <= MAX_RUN) {
    yield text; // fewer code units than either limit: nothing to cut
    return;
  }
  // one pass over code points, slicing the original string by code-unit offsets
  let cp = 0; // code points into the current 400,000-point chunk
  let start = 0;
  let run = 0;
  let space: boolean | undefined;
  for (let i = 0; i < text.length; ) {
    if (cp === MAX_CHARS) {
      yield text.slice(start, i);
      start = i;
      cp = 0;
      run = 0;
      space = undefined;
    }
    const c = text.charCodeAt(i);
    const wide = c >= 0xd800 && c <= 0xdbff && i + 1 < text.length && (text.charCodeAt(i + 1) & 0xfc00) === 0xdc00;
    const s = c < 0x80 ? (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) : PY_SPACE.test(wide ? text.slice(i, i + 2) : text[i]);
    if (s !== space) {
      run = 1;
      space = s;
    } else if (++run > MAX_RUN) {
      yield text.slice(start, i);
      start = i;
      run = 1;
    }
    i += wide ? 2 : 1;
    cp++;
  }
  yield text.slice(start);
}
