import * as fs from 'node:fs';
import * as path from 'node:path';
import { WasteError } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { checkModelLinks } from '../util/model-dir.js';
import { readBytes, readJson } from '../util/read.js';
import { HfTokenizer } from './hf.js';
import { parseRanks } from './ranks.js';
import { TiktokenTokenizer } from './tiktoken.js';
import type { Tokenizer } from './tokenizer.js';

/** The files a tokenizer is read from: tiktoken ranks (a container's, or a checkpoint's), or HuggingFace's JSON. */
const RANK_FILES = ['tokenizer.model', 'tiktoken.model'];
const HF_FILE = 'tokenizer.json';

/**
 * The tokenizer of a model directory — a container (`tokenizer.model` + `specials.json`), a
 * HuggingFace checkpoint (`tiktoken.model` + `tokenizer_config.json`, or `tokenizer.json`) — or of
 * a folder that holds only those files. Undefined when there is none; an error when one is there
 * but damaged.
 */
export function loadTokenizer(dir: string, opts: { modelVocab?: number } = {}): Tokenizer | undefined {
  checkModelLinks(dir);
  const at = (f: string) => path.join(dir, f);
  const rankFile = RANK_FILES.map(at).find((f) => fs.existsSync(f));
  if (rankFile) {
    const ranks = parseRanks(readBytes(rankFile), rankFile);
    const named = fs.existsSync(at('specials.json')) ? specialsJson(at('specials.json')) : fs.existsSync(at('tokenizer_config.json')) ? configSpecials(at('tokenizer_config.json')) : [];
    return new TiktokenTokenizer(ranks, named, rankFile, opts.modelVocab);
  }
  if (fs.existsSync(at(HF_FILE))) {
    const cfg = fs.existsSync(at('tokenizer_config.json')) ? readJson(at('tokenizer_config.json')) : {};
    return new HfTokenizer(readJson(at(HF_FILE)), cfg, at(HF_FILE));
  }
  return undefined;
}

/**
 * The file that names a directory's special tokens, as loadTokenizer reads them: specials.json (a
 * container's), tokenizer_config.json (a checkpoint's), or tokenizer.json; `present` false when
 * none is there (then the one the directory's rank file goes with).
 */
export function specialsFile(dir: string): { file: string; present: boolean } {
  const at = (f: string) => path.join(dir, f);
  const rankFile = RANK_FILES.find((f) => fs.existsSync(at(f)));
  if (!rankFile && fs.existsSync(at(HF_FILE))) return { file: at(HF_FILE), present: true };
  for (const f of ['specials.json', 'tokenizer_config.json']) if (fs.existsSync(at(f))) return { file: at(f), present: true };
  return { file: at(rankFile === 'tiktoken.model' ? 'tokenizer_config.json' : 'specials.json'), present: false };
}

/**
 * Fail at once, before a model is opened, when its directory has no tokenizer: commands that take
 * text need one, and loading the weights first would only delay the same error.
 */
export function requireTokenizerFiles(dir: string): void {
  // a path that is not a directory is the model's to report (no such file, not a container)
  if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) return;
  if (![...RANK_FILES, HF_FILE].some((f) => fs.existsSync(path.join(dir, f)))) throw noTokenizer(dir);
}

/** The error for a model directory without a tokenizer. */
export function noTokenizer(dir: string): WasteError {
  return new WasteError('E_UNSUPPORTED', `${dir} has no tokenizer (${RANK_FILES.join(', ')} or ${HF_FILE}), so it runs token ids only`);
}

/** Like loadTokenizer, but a missing tokenizer is an error that says what was looked for. */
export function requireTokenizer(dir: string): Tokenizer {
  const t = loadTokenizer(dir);
  if (!t) throw new WasteError('E_ARG', `${dir} has no tokenizer (looked for ${RANK_FILES.join(', ')} and ${HF_FILE})`);
  return t;
}

const MAX_SPECIALS = 1 << 20;

/** A container's specials.json: [{ "id": n, "text": "…" }, …]. */
function specialsJson(file: string): { id: number; text: string }[] {
  const doc = readJson(file);
  if (!Array.isArray(doc) || doc.length > MAX_SPECIALS) throw new WasteError('E_FORMAT', `${file}: expected an array of {id, text}`);
  return doc.map((e, i) => {
    if (!isObject(e) || !Number.isInteger(e.id) || (e.id as number) < 0 || (e.id as number) >= 2 ** 31 || typeof e.text !== 'string')
      throw new WasteError('E_FORMAT', `${file}: entry ${i} is not {"id": a token id, "text": a string}`);
    return { id: e.id as number, text: e.text };
  });
}

/** tokenizer_config.json's added_tokens_decoder: { "163584": { "content": "[BOS]", … }, … }. */
function configSpecials(file: string): { id: number; text: string }[] {
  const doc = readJson(file);
  const dec = isObject(doc) ? doc.added_tokens_decoder : undefined;
  if (dec === undefined) return [];
  if (!isObject(dec)) throw new WasteError('E_FORMAT', `${file}: added_tokens_decoder is not an object`);
  return Object.entries(dec).map(([id, v]) => {
    if (!/^\d{1,10}$/.test(id) || Number(id) >= 2 ** 31 || !isObject(v) || typeof v.content !== 'string')
      throw new WasteError('E_FORMAT', `${file}: added_tokens_decoder["${id}"] is not a token id with a "content" string`);
    return { id: Number(id), text: v.content };
  });
}
