import type { Command } from 'commander';
import { openContainer } from '../../container/open.js';
import { WasteError } from '../../util/errors.js';
import { Progress } from '../progress.js';
import { formatSize } from '../../util/size.js';
import { modelOrDemo } from '../default-model.js';

export function registerVerify(program: Command): void {
  program
    .command('verify')
    .description("check every expert record's header and CRC32; names the first bad record and exits 1")
    .argument('[model]', 'container directory or model name (default: the demo model that ships with waste)')
    .option('-q, --quiet', 'no progress output', false)
    .action((model: string | undefined, o: { quiet: boolean }) => {
      const c = openContainer(modelOrDemo(model));
      try {
        let total = 0;
        for (const b of c.banks.values()) total += b.experts;
        const bar = new Progress('verify', total, o.quiet);
        let done = 0;
        let bytes = 0;
        const buf = new Uint8Array(Math.max(0, ...[...c.banks.values()].map((b) => b.stride)));
        for (const bank of c.banks.values()) {
          for (let e = 0; e < bank.experts; e++) {
            bank.read(e, buf, true);
            bytes += bank.stride;
            bar.update(++done);
          }
        }
        bar.done();
        process.stdout.write(`ok: ${done} expert records in ${c.banks.size} banks (${formatSize(bytes)}) have valid headers and checksums\n`);
      } catch (e) {
        if (e instanceof WasteError && e.code === 'E_IO') {
          process.stdout.write(`FAILED: ${e.message}\n`);
          process.exitCode = 1;
          return;
        }
        throw e;
      } finally {
        c.close();
      }
    });
}
