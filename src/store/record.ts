import * as fs from 'node:fs';
import * as path from 'node:path';
import { isObject } from '../util/fields.js';
import { readText } from '../util/read.js';

/** What the store knows of where a model came from, in `models/NAME/store.json`. */
export interface StoreRecord {
  /** The hub repository, e.g. `moonshotai/Kimi-Linear-48B-A3B-Instruct`. */
  repo: string;
  /** The revision asked for (a branch, a tag or a commit) and the commit it named then. */
  revision: string;
  commit: string;
  /** When the pull finished (ISO 8601). */
  pulled: string;
}

export const RECORD_FILE = 'store.json';

export function recordText(r: StoreRecord): string {
  return JSON.stringify(r, null, 1) + '\n';
}

/** The record of a stored model, or undefined for a container put there by hand (or a damaged record). */
export function readRecord(dir: string): StoreRecord | undefined {
  try {
    const doc: unknown = JSON.parse(readText(path.join(dir, RECORD_FILE), 1 << 20));
    if (!isObject(doc) || typeof doc.repo !== 'string' || typeof doc.revision !== 'string' || typeof doc.commit !== 'string') return undefined;
    return { repo: doc.repo, revision: doc.revision, commit: doc.commit, pulled: typeof doc.pulled === 'string' ? doc.pulled : '' };
  } catch {
    return undefined;
  }
}

/** Bytes a directory's files take on disk (allocated blocks, so sparse files count as they are). */
export function sizeOnDisk(dir: string): number {
  let n = 0;
  for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) n += sizeOnDisk(p);
    else if (e.isFile()) n += fs.statSync(p).blocks * 512;
  }
  return n;
}
