/**
 * Imported first by the library's entry, so an unsupported Node is refused with one clear error
 * before any other module of the package runs.
 */
import { unsupportedNode } from './node-version.js';

const why = unsupportedNode();
if (why) throw new Error(why);
