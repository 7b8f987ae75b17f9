/**
 * The prompt thread (see PromptThread): the model's tokenizer and chat format, loaded as the model
 * loaded them, render and tokenize one conversation (or tokenize one completion's text) at a time.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadChatFormat } from '../chat/format.js';
import { loadTokenizer } from '../tokenizer/load.js';
import { WasteError } from '../util/errors.js';
import type { PromptJob, PromptReply, PromptThreadInit } from './prompt-thread.js';

const init = workerData as PromptThreadInit;
const tokenizer = loadTokenizer(init.dir, { modelVocab: init.modelVocab });
const format = loadChatFormat(init.dir, { native: init.native });

parentPort!.on('message', (job: PromptJob) => {
  let reply: PromptReply;
  try {
    if (!tokenizer) throw new WasteError('E_UNSUPPORTED', `${init.dir} has no tokenizer`);
    const ids = Int32Array.from('text' in job ? tokenizer.encode(job.text) : format.encode(tokenizer, job.messages, job.opts));
    reply = { id: job.id, ids };
    parentPort!.postMessage(reply, [ids.buffer]);
  } catch (e) {
    reply = { id: job.id, error: { code: e instanceof WasteError ? e.code : 'E_STATE', message: (e as Error)?.message ?? String(e) } };
    parentPort!.postMessage(reply);
  }
});
