import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeFileAtomic } from '../util/write-atomic.js';
import { readGenerationDefaults } from '../checkpoint/generation-config.js';
import { WasteError, quoted } from '../util/errors.js';
import { isObject } from '../util/fields.js';
import { readBytes, readJson } from '../util/read.js';

/**
 * The tokenizer side of a checkpoint, carried into the container as the C engine lays it out:
 * `tokenizer.model` (the tiktoken rank file), `specials.json` (id and text of every added token,
 * from tokenizer_config.json), `chat_template.jinja`; a HuggingFace `tokenizer.json` is kept too,
 * and so is `generation_config.json` (the sampling settings the model recommends).
 * Returns the names written.
 */
export function copyTokenizerFiles(src: string, out: string): string[] {
  const written: string[] = [];
  const rank = ['tiktoken.model', 'tokenizer.model'].map((f) => path.join(src, f)).find((f) => fs.existsSync(f));
  if (rank) {
    writeFileAtomic(path.join(out, 'tokenizer.model'), readBytes(rank));
    written.push('tokenizer.model');
  }
  const hf = path.join(src, 'tokenizer.json');
  if (fs.existsSync(hf)) {
    writeFileAtomic(path.join(out, 'tokenizer.json'), readBytes(hf));
    written.push('tokenizer.json');
  }

  const cfgFile = path.join(src, 'tokenizer_config.json');
  const tcfg = fs.existsSync(cfgFile) ? readJson(cfgFile) : undefined;
  if (tcfg !== undefined && !isObject(tcfg)) throw new WasteError('E_FORMAT', `${cfgFile}: not a JSON object`);
  const decoder = tcfg?.added_tokens_decoder;
  if (decoder !== undefined) {
    if (!isObject(decoder)) throw new WasteError('E_FORMAT', `${cfgFile}: added_tokens_decoder is not an object`);
    const specials = Object.entries(decoder).map(([id, v]) => {
      const n = Number(id);
      if (!/^\d+$/.test(id) || !(n < 2 ** 31)) throw new WasteError('E_FORMAT', `${cfgFile}: added_tokens_decoder key ${quoted(id)} is not a token id`);
      if (!isObject(v) || typeof v.content !== 'string') throw new WasteError('E_FORMAT', `${cfgFile}: added_tokens_decoder[${quoted(id)}].content is not a string`);
      return { id: n, text: v.content };
    });
    specials.sort((a, b) => a.id - b.id);
    if (specials.length) {
      writeFileAtomic(path.join(out, 'specials.json'), JSON.stringify(specials, null, 1) + '\n');
      written.push('specials.json');
    }
  }

  const template = chatTemplate(src, tcfg);
  if (template !== undefined) {
    writeFileAtomic(path.join(out, 'chat_template.jinja'), template);
    written.push('chat_template.jinja');
  }
  // the model's recommended sampling settings travel with it (checked first: a bad file fails here)
  const gen = path.join(src, 'generation_config.json');
  if (fs.existsSync(gen)) {
    readGenerationDefaults(src);
    writeFileAtomic(path.join(out, 'generation_config.json'), readBytes(gen));
    written.push('generation_config.json');
  }
  return written;
}

/** chat_template.jinja, else chat_template.json's template, else tokenizer_config.json's. */
function chatTemplate(src: string, tcfg: Record<string, unknown> | undefined): string | undefined {
  const jinja = path.join(src, 'chat_template.jinja');
  if (fs.existsSync(jinja)) return readBytes(jinja).toString('utf8');
  const json = path.join(src, 'chat_template.json');
  if (fs.existsSync(json)) {
    const doc = readJson(json);
    const t = pickTemplate(isObject(doc) ? doc.chat_template : undefined);
    if (t === undefined) throw new WasteError('E_FORMAT', `${json}: chat_template is not a string`);
    return t;
  }
  return pickTemplate(tcfg?.chat_template);
}

/** A template is a string, or a list of named ones of which "default" (else the first) is taken. */
function pickTemplate(t: unknown): string | undefined {
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t.filter((x): x is { name?: unknown; template: string } => isObject(x) && typeof x.template === 'string');
    return (named.find((x) => x.name === 'default') ?? named[0])?.template;
  }
  return undefined;
}
