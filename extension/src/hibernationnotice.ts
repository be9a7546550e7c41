/**
 * What a hibernation before the stop saved, for the stopped-server notice: "Variables of
 * train.ipynb saved at 14:05 CET: 3.2 GiB, 41 variables; 2 skipped: `loader` (an open file), `gen` (a
 * generator)." The usage document carries the server's last hibernation report (the hub's fracnb
 * service asks just before it stops the server); the hub's own pages write the same lines
 * (fracnb_spawner.hibernation.words; test-data/hibernation-notices.json holds both to it). Pure.
 */
import { clockTime, formatBytes } from './format';
import type { IUsage, IKernelOutcome } from './usage';

/** More skipped variables than this: the first three are named, and how many more. */
const SKIPPED_LISTED = 4;
export const NOTHING_TO_SAVE = 'No variables to save.';

function sentence(text: string | null): string {
  return (text ?? 'no reason given').trim().replace(/\.+$/, '');
}

function skippedText(skipped: IKernelOutcome['skipped']): string {
  const shown = skipped.length <= SKIPPED_LISTED ? skipped : skipped.slice(0, SKIPPED_LISTED - 1);
  const names = shown.map(item => `\`${item.name}\` (${sentence(item.reason)})`).join(', ');
  const more = skipped.length - shown.length;
  return `${skipped.length} skipped: ${names}${more > 0 ? `, and ${more} more` : ''}`;
}

/** One kernel's line, or null for a kernel without variables. */
export function kernelLine(kernel: IKernelOutcome, timeZone?: string): string | null {
  const notebook = kernel.path ?? 'a kernel without a notebook';
  switch (kernel.status) {
    case 'saved':
    case 'partly_saved': {
      const at =
        kernel.saved_at === null ? '' : ` at ${clockTime(new Date(kernel.saved_at), timeZone)}`;
      const count = `${kernel.variables} variable${kernel.variables === 1 ? '' : 's'}`;
      const skipped = kernel.skipped.length > 0 ? `; ${skippedText(kernel.skipped)}` : '';
      return `Variables of ${notebook} saved${at}: ${formatBytes(kernel.bytes)}, ${count}${skipped}.`;
    }
    case 'busy':
      return `${notebook} was running a cell: its variables were not saved.`;
    case 'failed':
    case 'skipped_over_limit':
    case 'not_supported':
      return `Variables of ${notebook} not saved: ${sentence(kernel.reason)}.`;
    default:
      return null;
  }
}

/** A line per kernel, or the one line saying there was nothing to save. */
export function hibernationLines(kernels: IKernelOutcome[], timeZone?: string): string[] {
  const lines = kernels
    .map(kernel => kernelLine(kernel, timeZone))
    .filter((line): line is string => line !== null);
  return lines.length > 0 ? lines : [NOTHING_TO_SAVE];
}

/** Whether the last document's hibernation saved any variables. */
export function savedAny(usage: IUsage | null): boolean {
  return (usage?.hibernation?.kernels ?? []).some(
    kernel => kernel.status === 'saved' || kernel.status === 'partly_saved'
  );
}

/**
 * What the stop did to the notebooks open in this tab when none of them was saved although others were
 * (it was running a cell, say): "train.ipynb was running a cell: its variables were not saved." Its
 * toast then says that, not "Your variables were saved". null when one of them was saved, or the
 * report does not name them.
 */
export function unsavedOpenLine(usage: IUsage | null, openPaths: string[]): string | null {
  const open = (usage?.hibernation?.kernels ?? []).filter(
    kernel => kernel.path !== null && openPaths.includes(kernel.path)
  );
  if (open.some(kernel => kernel.status === 'saved' || kernel.status === 'partly_saved')) {
    return null;
  }
  const lines = open.map(kernel => kernelLine(kernel)).filter(line => line !== null);
  return lines.length > 0 ? lines[0] : null;
}

/**
 * Whether the last document's hibernation was answered and found no kernel holding variables (none
 * running, or all empty): then nothing was lost, and the notice says so once.
 */
export function heldNothing(usage: IUsage | null): boolean {
  const report = usage?.hibernation ?? null;
  if (report === null) {
    return false;
  }
  const lines = hibernationLines(report.kernels);
  return lines.length === 1 && lines[0] === NOTHING_TO_SAVE;
}

/** The notice's lines for the last document before the stop; [] when it had no hibernation. */
export function stopHibernationLines(usage: IUsage | null, timeZone?: string): string[] {
  const report = usage?.hibernation ?? null;
  return report === null ? [] : hibernationLines(report.kernels, timeZone);
}
