#!/usr/bin/env node
// The CLI entry: runs the compiled TypeScript in dist/ (built by `npm install`).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const entry = new URL('../dist/src/cli/main.js', import.meta.url);
if (!existsSync(fileURLToPath(entry))) {
  process.stderr.write('waste: not built yet; run `npm install` (or `npm run build`) in the package directory\n');
  process.exit(1);
}
// checked before the rest is loaded, so an old Node gets one line and no stack trace
const { unsupportedNode } = await import(new URL('../dist/src/util/node-version.js', import.meta.url).href);
const why = unsupportedNode();
if (why) {
  process.stderr.write(`${why}\n`);
  process.exit(1);
}
const { main } = await import(entry.href);
process.exitCode = await main(process.argv);
