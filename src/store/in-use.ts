import * as fs from 'node:fs';
import * as path from 'node:path';
import { processAlive } from '../util/process-alive.js';
import { readText } from '../util/read.js';
import { modelsDir } from './home.js';

/**
 * Which processes have a stored model open: while one does (run, chat, serve, the library), it
 * keeps a marker `$WASTE_HOME/models/.NAME.in-use/PID` holding its command line, removed when the
 * model closes. `waste rm NAME` refuses while a live process holds one (a marker left by a process
 * that is gone is ignored, and removed by the next look). Markers are shared: any number of
 * processes may hold the same model. Models outside the store are not marked: rm never removes them.
 */

/** How many times this process has each marker open (the library may open one model twice). */
const held = new Map<string, number>();
/** The longest command line a marker keeps. */
const MAX_COMMAND = 160;

function usersDir(name: string): string {
  return path.join(modelsDir(), `.${name}.in-use`);
}

/** The store name of a model directory, if it is one of the store's models. */
function storeNameOf(dir: string): string | undefined {
  try {
    const real = fs.realpathSync(dir);
    if (path.dirname(real) !== fs.realpathSync(modelsDir())) return undefined;
    const name = path.basename(real);
    return /^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(name) ? name : undefined;
  } catch {
    return undefined;
  }
}

/** This process's command line as a person typed it (`waste serve kimi …`). */
function commandLine(): string {
  const script = process.argv[1] ? path.basename(process.argv[1]) : 'node';
  const text = [/^waste(\.js)?$/.test(script) ? 'waste' : script, ...process.argv.slice(2)].join(' ');
  return text.length > MAX_COMMAND ? `${text.slice(0, MAX_COMMAND)}…` : text;
}

/**
 * Mark the model at `dir` in use by this process, if it is a stored model; returns the release
 * (call it once, when the model closes). A store that cannot be written leaves the model unmarked:
 * using it matters more than guarding it.
 */
export function markInUse(dir: string): () => void {
  const name = storeNameOf(dir);
  if (name === undefined) return () => {};
  const file = path.join(usersDir(name), String(process.pid));
  const n = held.get(file) ?? 0;
  if (n === 0) {
    try {
      fs.mkdirSync(usersDir(name), { recursive: true });
      fs.writeFileSync(file, commandLine());
    } catch {
      return () => {};
    }
  }
  held.set(file, n + 1);
  let released = false;
  return () => {
    if (released) return;
    released = true;
    const left = (held.get(file) ?? 1) - 1;
    if (left > 0) return void held.set(file, left);
    held.delete(file);
    try {
      fs.rmSync(file, { force: true });
      // the last user takes the folder with it (another's marker keeps it: ENOTEMPTY)
      fs.rmdirSync(usersDir(name));
    } catch {
      /* best effort */
    }
  };
}

/** The live processes other than this one that have stored model `name` open, with their command lines. */
export function usersOf(name: string): { pid: number; command: string }[] {
  const dir = usersDir(name);
  let entries: string[];
  try {
    entries = fs.readdirSync(dir);
  } catch {
    return [];
  }
  const out: { pid: number; command: string }[] = [];
  for (const e of entries) {
    const pid = Number(e);
    if (!/^\d{1,10}$/.test(e) || pid === process.pid) continue;
    const file = path.join(dir, e);
    if (!processAlive(pid)) {
      fs.rmSync(file, { force: true });
      continue;
    }
    let command = '';
    try {
      command = readText(file, 4 * MAX_COMMAND).slice(0, MAX_COMMAND + 1);
    } catch {
      /* a marker being removed: the process is still named */
    }
    out.push({ pid, command });
  }
  return out;
}
