/**
 * What the restore offer and its outcome say, and which saved states to offer. Pure.
 */
import type { Session } from '@jupyterlab/services';

import type { IRestoreReport, ISavedState } from './hibernation-api';
import { formatBytes } from './format';
import { restoreOffer } from './wording';

/** "Restore variables from 14:05 (3.2 GiB)" for a state, now, in the browser's time zone. */
export function offerText(state: ISavedState, now: Date = new Date()): string {
  return restoreOffer(new Date(state.saved_at ?? now.toISOString()), state.bytes, now);
}

/** One line on what a restore did, for a notification. Pure. */
export function restoreResult(report: IRestoreReport): string {
  if (report.status === 'restored' || report.status === 'partly_restored') {
    const count = report.restored.length;
    const parts = [
      `Restored ${count} ${count === 1 ? 'variable' : 'variables'} (${formatBytes(report.bytes)}).`
    ];
    if (report.failed.length > 0) {
      parts.push(`Not restored: ${report.failed.map(f => `${f.name} (${f.reason})`).join(', ')}.`);
    }
    parts.push(...report.notices);
    return parts.join(' ');
  }
  return report.reason ?? 'Nothing was restored.';
}

/** The states the offer is for: usable, not restored yet, and for a notebook with a kernel. */
export function statesToOffer(
  states: ISavedState[],
  sessions: Session.IModel[],
  offered: Set<string>
): Array<{ state: ISavedState; kernelId: string }> {
  const byPath = new Map(states.filter(s => s.problem === null).map(s => [s.path, s]));
  const found = [];
  for (const session of sessions) {
    const state = byPath.get(session.path);
    const kernelId = session.kernel?.id;
    if (state === undefined || kernelId === undefined || state.restored_at !== null) {
      continue;
    }
    if (!offered.has(`${state.key} ${kernelId}`)) {
      found.push({ state, kernelId });
    }
  }
  return found;
}
