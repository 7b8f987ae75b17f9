import type { Command } from 'commander';
import { isCheckpointDir, openModelCheckpoint, openModelContainer } from '../../model/registry.js';
import { cpuCount } from '../../kernels/wasm/pool.js';
import { DEFAULT_CHUNK, planFor } from '../../engine/plan.js';
import { formatSize, parseSize } from '../../util/size.js';
import { intArg } from '../args.js';
import { OPTION_BOUNDS } from '../../engine/options.js';
import { modelOrDemo } from '../default-model.js';
import { visionOf, withinRam } from '../../engine/assemble.js';
import { architecture } from '../../model/registry.js';
import { ContainerSource } from '../../model/sources/container-source.js';

export function registerPlan(program: Command): void {
  program
    .command('plan')
    .description('the memory plan: the floor, the default budget, and what a given budget buys (loads no weights)')
    .argument('[model]', 'container directory, HuggingFace checkpoint folder (run with every weight in f32) or model name (default: the demo model that ships with waste)')
    .option('--ctx <n>', 'context length the plan reserves state for', intArg(...OPTION_BOUNDS.maxContext), 4096)
    .option('--budget <size>', 'a RAM budget to evaluate: bytes, 512M, 8G, or a percentage of usable RAM')
    .option('--threads <n>', 'compute threads (scratch is per thread)', intArg(...OPTION_BOUNDS.threads))
    .option('--chunk <n>', 'prefill chunk the plan reserves scratch for (as --chunk when opening)', intArg(...OPTION_BOUNDS.chunk), DEFAULT_CHUNK)
    .option('--sessions <n>', 'sessions the plan reserves state for (waste serve --sessions)', intArg(...OPTION_BOUNDS.sessions), 1)
    .option('--parallel <n>', 'requests decoding at once (waste serve --parallel): a session\'s state each, reserved as --sessions does', intArg(...OPTION_BOUNDS.sessions))
    .option('--vision', "reserve the vision tower's room, as opening a model with one does by default")
    .option('--no-vision', "leave the vision tower's room to the expert cache (waste run/chat/serve --no-vision)")
    .option('--image-patches <n>', 'the most patches one image may become (as when opening)', intArg(...OPTION_BOUNDS.imagePatches))
    .option('--ram <size>', "plan for a machine with this much RAM, all of it free (16G, 64G…), instead of this one")
    .option('--json', 'print JSON', false)
    .action((model: string | undefined, o: { ram?: string; ctx: number; budget?: string; threads?: number; chunk: number; sessions: number; parallel?: number; vision?: boolean; imagePatches?: number; json: boolean }) => {
      const dir = modelOrDemo(model);
      // a checkpoint folder as run and serve open it: every weight resident in f32, nothing streamed
      const kind = isCheckpointDir(dir) ? 'checkpoint' : 'container';
      const ck = kind === 'checkpoint' ? openModelCheckpoint(dir) : undefined;
      const c = ck ? undefined : openModelContainer(dir);
      try {
        const threads = o.threads ?? cpuCount();
        const arch = ck?.arch ?? architecture(c!.config.arch);
        const cfg = ck?.config ?? c!.config;
        const source = ck?.source ?? new ContainerSource(c!);
        let stride = 0;
        for (const b of c?.banks.values() ?? []) stride = Math.max(stride, b.stride);
        const vision = o.vision !== false ? visionOf(arch, dir, { kind, source }, cfg, threads, o.chunk, o.imagePatches) : undefined;
        // another machine's RAM, idle: no cgroup, nothing else holding memory
        const machine = o.ram !== undefined ? parseSize(o.ram, undefined, 'ram') : undefined;
        const ram = machine !== undefined ? { physical: machine, usable: machine } : undefined;
        const plan = planFor(arch, cfg, arch.planWeights(source, cfg, c?.quant), stride, c?.quant, { maxContext: o.ctx, threads, chunk: o.chunk, sessions: Math.max(o.sessions, o.parallel ?? 1), visionBytes: vision?.bytes, ram });
        // what opening would do with it
        const budget = withinRam(o.budget !== undefined ? parseSize(o.budget, plan.ram.usable, 'budget') : undefined, plan.ram.usable, (m) => process.stderr.write(`waste: warning: ${m}\n`));
        const below = budget !== undefined && budget < plan.floorBytes;
        const layout = budget !== undefined && !below ? plan.layout(budget) : undefined;
        const def = plan.elasticLayout(plan.defaultBudget);
        const floorLayout = plan.layoutForSlots(plan.floorRecords);
        const out = {
          kind,
          context: plan.maxContext,
          sessions: plan.sessions,
          parallel: o.parallel ?? null,
          trunk_bytes: plan.trunkBytes,
          vision_bytes: plan.visionBytes,
          state_bytes: plan.stateBytes,
          scratch_bytes_per_arena: plan.scratchBytesPerArena,
          expert_scratch_bytes_per_arena: plan.expertScratchBytesPerArena,
          floor_records: plan.floorRecords,
          floor_arenas: plan.layout(plan.floorBytes).arenas.length,
          expert_record_bytes: plan.recordBytes,
          working_set_records: plan.workingSetRecords,
          working_set_bytes: plan.workingSetBytes,
          floor_bytes: plan.floorBytes,
          physical_ram_bytes: plan.ram.physical,
          cgroup_limit_bytes: plan.ram.cgroupLimit ?? null,
          usable_ram_bytes: plan.ram.usable,
          default_budget_bytes: plan.defaultBudget,
          default_from: plan.defaultFrom,
          available_ram_bytes: plan.ram.available ?? null,
          available_from: plan.ram.availableFrom ?? null,
          os_margin_bytes: plan.osMarginBytes,
          default_cache_slots: def.slots,
          default_cache_arenas: def.arenas.filter((a) => a.slots).length,
          budget_bytes: budget ?? null,
          cache_slots: layout ? layout.slots : budget !== undefined ? -1 : null,
          expert_cache_bytes: layout ? layout.slots * plan.recordBytes : budget !== undefined ? -1 : null,
          total_expert_records: plan.totalExperts,
        };
        if (o.json) process.stdout.write(JSON.stringify(out, null, 2) + '\n');
        else {
          const rows: [string, string][] = [
            ['trunk (resident)', formatSize(plan.trunkBytes)],
            [`state (${plan.maxContext} tokens${plan.sessions > 1 ? ` × ${plan.sessions} sessions` : ''})`, formatSize(plan.stateBytes)],
            [`scratch (× ${floorLayout.arenas.filter((a) => a.groups.length).length} trunk arenas)`, formatSize(plan.scratchBytesPerArena)],
            ...(plan.visionBytes ? ([['vision tower', `${formatSize(plan.visionBytes)} (loaded by the first image; --no-vision leaves it to the cache)`]] as [string, string][]) : []),
            ...(plan.recordBytes
              ? ([
                  [`cache at the floor`, `${formatSize(plan.floorRecords * plan.recordBytes)} (${plan.floorRecords} records: two layers' selected experts)`],
                  [`expert scratch (× ${floorLayout.arenas.filter((a) => !a.groups.length).length} arena${floorLayout.arenas.filter((a) => !a.groups.length).length === 1 ? '' : 's'})`, formatSize(plan.expertScratchBytesPerArena)],
                ] as [string, string][])
              : []),
            ['FLOOR', `${formatSize(plan.floorBytes)} (${plan.floorBytes} bytes, in ${floorLayout.arenas.length} arenas of whole pages)`],
            ['one token of experts', `${formatSize(plan.workingSetBytes)} (${plan.workingSetRecords} records of ${formatSize(plan.recordBytes)})`],
            ['usable RAM', `${formatSize(plan.ram.usable)}${plan.ram.cgroupLimit !== undefined ? ' (cgroup limit)' : ''} of ${formatSize(plan.ram.physical)} physical${machine !== undefined ? ' (--ram: a machine of that size, idle)' : ''}`],
            ['available now', machine !== undefined ? `all of it (--ram); the default leaves ${formatSize(plan.osMarginBytes)} free` : plan.ram.available !== undefined ? `${formatSize(plan.ram.available)} (${plan.ram.availableFrom === 'cgroup' ? "the cgroup's headroom" : 'MemAvailable'}); the default leaves ${formatSize(plan.osMarginBytes)} of it free` : `unknown; the default leaves ${formatSize(plan.osMarginBytes)} of usable RAM free`],
            [
              'default budget',
              plan.floorBytes > plan.ram.usable
                ? 'none: the floor is more than the usable RAM, the model cannot open on this machine'
                : kind === 'checkpoint'
                  ? `${formatSize(plan.defaultBudget)}: the floor, every weight resident in f32 (a checkpoint runs as the unquantized reference: nothing streams)`
                  : `${formatSize(plan.defaultBudget)}: ${
                    plan.defaultFrom === 'expert bytes'
                      ? 'the floor and every expert record'
                      : plan.defaultFrom === 'floor'
                        ? 'the floor (available RAM less the margin holds no more)'
                        : `available RAM (${plan.defaultFrom}) less the margin`
                  }, ${def.slots} of ${plan.totalExperts} cache slots in ${def.arenas.filter((a) => a.slots).length} arena${def.arenas.filter((a) => a.slots).length === 1 ? '' : 's'} it can give back under memory pressure`,
            ],
          ];
          if (budget !== undefined)
            rows.push([
              `budget ${formatSize(budget)}`,
              below ? `BELOW the floor of ${formatSize(plan.floorBytes)}: the engine will not open` : `${layout!.slots} cache slots (${formatSize(layout!.slots * plan.recordBytes)}) of ${plan.totalExperts} expert records`,
            ]);
          const w = Math.max(24, ...rows.map(([k]) => k.length));
          process.stdout.write(rows.map(([k, v]) => `${k.padEnd(w)} ${v}\n`).join(''));
        }
        // as when opening: a budget below the floor is the caller's error
        if (below) process.exitCode = 2;
      } finally {
        (ck ?? c)!.close();
      }
    });
}
