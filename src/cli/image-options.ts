import { type Command, Option } from 'commander';
import type { ImageRoute } from '../image/preprocess.js';

/** The images a command shows the model. */
export interface ImageFlags {
  image: string[];
  imageRoute: ImageRoute;
}

export function addImageOptions(cmd: Command, what: string): Command {
  return cmd
    .option('--image <file>', `${what} (PNG, JPEG, BMP or GIF; repeatable)`, (v: string, acc: string[]) => [...acc, v], [] as string[])
    .addOption(
      new Option('--image-route <route>', "how an image becomes patches: waste (the C engine's: at most 1024 patches, 256 rows for K3) or native (the release processor's resolution: up to 4x the rows)")
        .choices(['waste', 'native'])
        .default('waste'),
    );
}
