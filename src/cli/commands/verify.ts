import * as fs from 'node:fs';
import * as path from 'node:path';
import type { Command } from 'commander';
import { checkChecksum, fileChecksum } from '../../container/checksums.js';
import { CODEBOOKS } from '../../container/codebooks.js';
import { checkManifestDigest } from '../../container/manifest.js';
import { architecture, openModelContainer } from '../../model/registry.js';
import { TRUNK } from '../../container/trunk.js';
import { WasteError } from '../../util/errors.js';
import { MODEL_TEXT_FILES, openModelText } from '../../chat/model-text.js';
import { Progress } from '../progress.js';
import { formatSize } from '../../util/size.js';
import { modelOrDemo } from '../default-model.js';

export function registerVerify(program: Command): void {
  program
    .command('verify')
    .description("check trunk.bin and codebooks.bin against their SHA-256 and every expert record's header and CRC32, and the chat format's control tokens against specials.json; names the first bad file or record and exits 1 (also when a file has no checksum to check)")
    .argument('[model]', 'container directory or model name (default: the demo model that ships with waste)')
    .option('-q, --quiet', 'no progress output', false)
    .action((model: string | undefined, o: { quiet: boolean }) => {
      const c = openModelContainer(modelOrDemo(model));
      try {
        if (c.manifest.sparse) throw new WasteError('E_ARG', `${c.dir} is a sparse container (sizes only, written by waste synth --sparse): it holds no records to verify`);
        checkManifestDigest(c.manifest);
        // the tokenizer and chat format as an open reads them: a damaged specials.json is a bad file too
        try {
          openModelText(c.dir, { native: architecture(c.config.arch).chatFormat, modelVocab: c.config.vocab });
        } catch (e) {
          if (e instanceof WasteError) throw new WasteError('E_IO', e.message);
          throw e;
        }
        const sums = c.manifest.checksums;
        const files = [...sums.keys()];
        // what an open reads besides the weights: the tokenizer and the chat format change every prompt, a vision tower's settings every image
        const read = [...MODEL_TEXT_FILES, 'vision.json', 'preprocessor_config.json'].filter((f) => fs.existsSync(path.join(c.dir, f)));
        const unsummed = [TRUNK, ...(c.codebooks ? [CODEBOOKS] : []), ...read].filter((f) => !sums.has(f));
        let total = 0;
        for (const sum of sums.values()) total += sum.bytes;
        for (const b of c.banks.values()) total += b.experts * b.stride;
        const bar = new Progress('verify', total, o.quiet, process.stderr, formatSize);
        let done = 0;
        for (const f of files) {
          checkChecksum(f, sums.get(f)!, fileChecksum(path.join(c.dir, f), (n) => bar.update((done += n))));
        }
        let records = 0;
        let bytes = 0;
        const buf = new Uint8Array(Math.max(0, ...[...c.banks.values()].map((b) => b.stride)));
        for (const bank of c.banks.values()) {
          for (let e = 0; e < bank.experts; e++) {
            bank.read(e, buf, true);
            records++;
            bytes += bank.stride;
            bar.update((done += bank.stride));
          }
        }
        bar.done();
        const summed = files.length ? `${listed(files)} match${files.length > 1 ? ' their' : 'es its'} SHA-256; ` : '';
        const checked = `${summed}${records} expert records in ${c.banks.size} banks (${formatSize(bytes)}) have valid headers and checksums`;
        // what has no checksum could be damaged without a trace: not verified, so not ok
        const unchecked: string[] = [];
        if (unsummed.length) unchecked.push(`no checksum for ${listed(unsummed)}, so ${unsummed.length > 1 ? 'their' : 'its'} bytes could not be checked`);
        if (!c.manifest.digest) unchecked.push('no manifest_sha256, so its own values could not be checked');
        if (unchecked.length) {
          process.stdout.write(`UNVERIFIED: manifest.json has ${unchecked.join(', and ')} (${checked})\n`);
          process.exitCode = 1;
          return;
        }
        process.stdout.write(`ok: ${checked}\n`);
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

/** "a", "a and b", "a, b and c". */
function listed(names: string[]): string {
  return names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names[names.length - 1]}` : names.join('');
}
