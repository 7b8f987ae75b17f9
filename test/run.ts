/**
 * `npm test`: runs every dist/test/*.test.js with node's test runner and its TAP reporter.
 * (Passing the directory to `node --test` would also run the helpers as test files, and globs in
 * --test arguments need Node 21.) Set WASTE_TEST_FILTER to a substring to run some files only, and
 * WASTE_TEST_NAME to a regular expression to run only the tests whose names match (every test can
 * run alone: what a test needs is made in a hook, never left by an earlier test).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { run } from 'node:test';
import { tap } from 'node:test/reporters';

const here = path.dirname(fileURLToPath(import.meta.url));
const filter = process.env.WASTE_TEST_FILTER ?? '';
const files = fs
  .readdirSync(here)
  .filter((f) => f.endsWith('.test.js') && f.includes(filter))
  .sort()
  .map((f) => path.join(here, f));

let failed = false;
const names = process.env.WASTE_TEST_NAME;
const stream = run({ files, concurrency: Math.max(1, os.availableParallelism?.() ?? os.cpus().length), ...(names ? { testNamePatterns: [new RegExp(names)] } : {}) });
stream.on('test:fail', () => {
  failed = true;
});
stream.compose(tap).pipe(process.stdout);
stream.on('end', () => {
  if (failed) process.exitCode = 1;
});
