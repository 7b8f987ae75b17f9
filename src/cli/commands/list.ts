import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { planMemory } from '../../engine/plan.js';
import { cpuCount } from '../../kernels/wasm/pool.js';
import { architecture, openModelContainer } from '../../model/registry.js';
import { identityAside } from '../../convert/job.js';
import { knownModels } from '../../pull/known.js';
import { PidLock } from '../../util/pid-lock.js';
import { checkStoreName, downloadsDir, modelsDir, pullLockFile, storedModel } from '../../store/home.js';
import { readRecord, sizeOnDisk } from '../../store/record.js';
import { usersOf } from '../../store/in-use.js';
import { WasteError } from '../../util/errors.js';
import { formatSize } from '../../util/size.js';
import { processAlive } from '../../util/process-alive.js';

interface Row {
  name: string;
  architecture: string;
  size_bytes: number;
  parameters: number;
  active_parameters: number;
  floor_bytes: number;
  repo: string | null;
  revision: string | null;
  commit: string | null;
  path: string;
}

export function registerList(program: Command): void {
  program
    .command('list')
    .description('the models in the local store ($WASTE_HOME/models): name, architecture, size on disk, parameters, RAM floor, source')
    .option('--json', 'print JSON', false)
    .action((o: { json: boolean }) => {
      const rows = listModels();
      if (o.json) return void process.stdout.write(JSON.stringify(rows, null, 1) + '\n');
      if (!rows.length) return void process.stdout.write(`no models in ${modelsDir()} (\`waste pull ${knownModels()[0]?.short ?? 'OWNER/NAME'}\` adds one; \`demo\` is always there)\n`);
      const p = (n: number) => (n >= 1e12 ? `${(n / 1e12).toFixed(2)} T` : n >= 1e9 ? `${(n / 1e9).toFixed(2)} B` : `${(n / 1e6).toFixed(2)} M`);
      const table = [
        ['NAME', 'ARCH', 'SIZE', 'PARAMS', 'FLOOR', 'SOURCE'],
        ...rows.map((r) => [r.name, r.architecture, formatSize(r.size_bytes), p(r.parameters), formatSize(r.floor_bytes), r.repo ? `${r.repo}@${r.revision} (${r.commit?.slice(0, 12)})` : '-']),
      ];
      const w = table[0].map((_, i) => Math.max(...table.map((r) => r[i].length)));
      process.stdout.write(table.map((r) => r.map((c, i) => (i < r.length - 1 ? c.padEnd(w[i]) : c)).join('  ')).join('\n') + '\n');
    });
  program
    .command('rm')
    .description('remove a model from the local store, with what an unfinished pull of it left (its downloads, a half-converted container)')
    .argument('<name>', 'a name from `waste list`, or of a pull that did not finish')
    .option('--force', 'remove it even while a process (run, chat, serve) has it open', false)
    .action((name: string, o: { force: boolean }) => {
      checkStoreName(name);
      const user = usersOf(name)[0];
      if (user && !o.force) throw new WasteError('E_STATE', `${name} is in use by process ${user.pid}${user.command ? ` (${user.command})` : ''}; stop it first, or remove it anyway with --force`);
      // held for the whole removal, so no pull into the name starts half-way through it (the lock
      // lives in downloads/, which a store that never pulled has not made yet)
      fs.mkdirSync(downloadsDir(), { recursive: true });
      const lock = PidLock.take(pullLockFile(name), (pid) => `a pull into ${name} is running (process ${pid}); stop it first`);
      try {
      sweepRemovals();
      const parts: [string, string | undefined][] = [
        ['the model', storedModel(name)],
        ["an unfinished pull's conversion", existing(path.join(modelsDir(), `${name}.partial`))],
        ["an unfinished pull's conversion record", existing(identityAside(path.join(modelsDir(), `${name}.partial`)))],
        ["an unfinished pull's downloads (or a kept checkpoint)", existing(path.join(downloadsDir(), name))],
      ];
      const found = parts.filter((p): p is [string, string] => p[1] !== undefined);
      if (!found.length) throw new WasteError('E_ARG', `no model ${name} in ${modelsDir()}, and no pull of it in ${downloadsDir()}`);
      for (const [, dir] of found) {
        // renamed aside first: the name is gone at once, even if deleting many GB is interrupted
        const aside = path.join(path.dirname(dir), `.removing-${path.basename(dir)}-${process.pid}`);
        fs.renameSync(dir, aside);
        fs.rmSync(aside, { recursive: true, force: true });
      }
      process.stdout.write(`removed ${name}: ${found.map(([what]) => what).join(', ')}\n`);
      } finally {
        lock.release();
      }
    });
}

function existing(dir: string): string | undefined {
  return fs.existsSync(dir) ? dir : undefined;
}

/** What an interrupted `rm` left renamed aside (its process gone): deleted now. */
function sweepRemovals(): void {
  for (const root of [modelsDir(), downloadsDir()]) {
    let names: string[] = [];
    try {
      names = fs.readdirSync(root);
    } catch {
      continue;
    }
    for (const n of names) {
      const m = /^\.removing-.+-(\d+)$/.exec(n);
      if (!m || processAlive(Number(m[1]))) continue;
      fs.rmSync(path.join(root, n), { recursive: true, force: true });
    }
  }
}

/** Every stored model that opens, with what `waste list` shows. */
export function listModels(): Row[] {
  const root = modelsDir();
  if (!fs.existsSync(root)) return [];
  const rows: Row[] = [];
  for (const name of fs.readdirSync(root).sort()) {
    const dir = storedModel(name);
    if (!dir) continue;
    const rec = readRecord(dir);
    let arch = '?';
    let params = { total: 0, active: 0 };
    let floor = 0;
    try {
      const c = openModelContainer(dir);
      try {
        const a = architecture(c.config.arch);
        arch = c.config.arch;
        params = a.countParams(c.config as never);
        floor = planMemory(c, { maxContext: 4096, threads: cpuCount() }).floorBytes;
      } finally {
        c.close();
      }
    } catch {
      arch = 'unreadable';
    }
    rows.push({ name, architecture: arch, size_bytes: sizeOnDisk(dir), parameters: params.total, active_parameters: params.active, floor_bytes: floor, repo: rec?.repo ?? null, revision: rec?.revision ?? null, commit: rec?.commit ?? null, path: dir });
  }
  return rows;
}
