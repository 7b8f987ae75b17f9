import { WasteError } from '../util/errors.js';
import { type ChatFormat, type ChatMessage, type NativeChatFormat, loadChatFormat } from './format.js';
import { loadTokenizer, specialsFile } from '../tokenizer/load.js';
import type { Tokenizer } from '../tokenizer/tokenizer.js';

/**
 * The files of a model directory that decide how text becomes ids and ids text (a writer
 * checksums those it writes; verify holds any of them present without a checksum unverified).
 */
export const MODEL_TEXT_FILES: readonly string[] = ['tokenizer.model', 'tokenizer.json', 'tokenizer_config.json', 'specials.json', 'chat_template.jinja', 'chat.json', 'generation_config.json'];

/** What a control token looks like in a chat format's markup (Kimi's `<|im_end|>`, K3's `<|open|>`). */
const CONTROL = /<\|[^|<>\s]{1,64}\|>/g;

/** A conversation every format renders: the probe JinjaChatFormat already renders at load, handed over. */
const PROBE: ChatMessage[] = [
  { role: 'user', content: 'u' },
  { role: 'assistant', content: 'a' },
  { role: 'user', content: 'v' },
];

/**
 * The control tokens a chat format is written in must be special tokens of the model's tokenizer.
 * Without them — a container whose specials.json is missing or damaged — the markup would be
 * tokenized as plain text, and the model would be handed a conversation in a form it never saw,
 * without a word. A format that does not render is left alone here: using it reports that.
 */
export function checkChatMarkup(tok: Tokenizer, format: ChatFormat, dir: string): void {
  let markup: string[];
  try {
    markup = format.render(PROBE, { open: true }, tok).flatMap((s) => (s.kind === 'markup' ? [s.text] : []));
  } catch (e) {
    if (e instanceof WasteError) return;
    throw e;
  }
  const missing: string[] = [];
  for (const text of markup) for (const m of text.matchAll(CONTROL)) if (tok.specialId(m[0]) === undefined && !missing.includes(m[0])) missing.push(m[0]);
  if (!missing.length) return;
  const { file, present } = specialsFile(dir);
  const shown = missing.slice(0, 3).join(', ') + (missing.length > 3 ? ', …' : '');
  throw new WasteError(
    'E_FORMAT',
    present
      ? `${file}: names no special token ${shown}, which the chat format (${format.source}) is written in (the file is damaged, or not this model's)`
      : `${file} is missing, and the chat format (${format.source}) is written in the special tokens it names (${shown}): without it they would be read as plain text`,
  );
}

/**
 * A model directory's tokenizer and chat format, read when the model opens and checked against each
 * other (checkChatMarkup); undefined when the directory has no tokenizer. A chat format that fails
 * to load is left out (it fails again, naming what is wrong, when a conversation needs it).
 */
export function openModelText(dir: string, opts: { native?: NativeChatFormat; modelVocab?: number } = {}): { tokenizer: Tokenizer; format?: ChatFormat } | undefined {
  const tokenizer = loadTokenizer(dir, { modelVocab: opts.modelVocab });
  if (!tokenizer) return undefined;
  let format: ChatFormat;
  try {
    format = loadChatFormat(dir, { native: opts.native });
  } catch (e) {
    if (e instanceof WasteError) return { tokenizer };
    throw e;
  }
  checkChatMarkup(tokenizer, format, dir);
  return { tokenizer, format };
}
