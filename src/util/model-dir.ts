import * as fs from 'node:fs';
import * as path from 'node:path';
import { WasteError } from './errors.js';

/** The longest link target an error quotes in full. */
const SHOWN = 160;

/**
 * The folder a model directory's symlinks must stay in: the directory itself, or, for a snapshot of
 * a HuggingFace cache (`…/models--ORG--NAME/snapshots/REV/`), its repository folder
 * (`…/models--ORG--NAME/`), whose `blobs/` the snapshot's links point into. Undefined when the
 * directory cannot be resolved (its opener reports that).
 */
export function linkRoot(dir: string): string | undefined {
  let real: string;
  try {
    real = fs.realpathSync(dir);
  } catch {
    return undefined;
  }
  const parent = path.dirname(real);
  const repo = path.dirname(parent);
  return path.basename(parent) === 'snapshots' && path.basename(repo).startsWith('models--') ? repo : real;
}

/**
 * A model directory's files may be symlinks — a HuggingFace cache's snapshot is made of them — but
 * none may lead out of it: a container's chat_template.jinja linked to /etc/passwd would otherwise
 * be read and used. Every symlink in `dir` must resolve inside linkRoot(dir); the first that does
 * not is one error naming it. Checked when a model's files are first opened (a container, a
 * checkpoint, a tokenizer, a chat format), over the whole directory, so a file read later is
 * covered too. A link to something that is neither a file nor a directory (a device, a FIFO) is
 * left to util/read.ts, which refuses it wherever it points; a dangling one, to the open that
 * then finds no file.
 */
export function checkModelLinks(dir: string): void {
  const root = linkRoot(dir);
  if (root === undefined) return;
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(dir, { withFileTypes: true });
  } catch {
    return; // not a directory: its opener says so
  }
  for (const e of entries) {
    if (!e.isSymbolicLink()) continue;
    const link = path.join(dir, e.name);
    let target: string;
    let st: fs.Stats;
    try {
      target = fs.realpathSync(link);
      st = fs.statSync(target);
    } catch {
      continue;
    }
    if (!st.isFile() && !st.isDirectory()) continue;
    if (target === root || target.startsWith(root.endsWith(path.sep) ? root : root + path.sep)) continue;
    const shown = target.length > SHOWN ? `${target.slice(0, SHOWN)}…` : target;
    throw new WasteError('E_IO', `${link}: a symlink to ${shown}, outside the model's directory (${root}); a model's links must stay inside it`);
  }
}
