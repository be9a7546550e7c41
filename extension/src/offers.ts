/**
 * What the restore offer and its outcome say, and which saved states to offer. Pure.
 */
import type { Session } from '@jupyterlab/services';

import type { IRestoreReport, ISavedState } from './hibernation-api';
import { formatBytes } from './format';
import { restoreOffer, savedWhen } from './wording';

/** "Restore variables from 14:05 EST (3.2 GiB)" for a state, now, in the browser's time zone. */
export function offerText(state: ISavedState, now: Date = new Date(), timeZone?: string): string {
  return restoreOffer(new Date(state.saved_at ?? now.toISOString()), state.bytes, now, timeZone);
}

/**
 * The question before a discard: "Delete the 4 variables of train.ipynb saved at 19:37 EST
 * (7.6 MiB)? They cannot be restored afterwards." (the widget and %fracnb_restore ask the same).
 */
export function discardQuestion(
  state: ISavedState,
  now: Date = new Date(),
  timeZone?: string
): string {
  const count = state.variables.length;
  const what = `${count} ${count === 1 ? 'variable' : 'variables'}`;
  const notebook = state.path ?? state.notebook_file;
  const of = notebook === null ? '' : ` of ${notebook}`;
  const when =
    state.saved_at === null
      ? ''
      : ` saved at ${savedWhen(new Date(state.saved_at), now, timeZone)}`;
  return `Delete the ${what}${of}${when} (${formatBytes(state.bytes)})? They cannot be restored afterwards.`;
}

/** A state as saved at one moment: a newer save of the notebook is another. Pure. */
export function stateStamp(state: ISavedState): string {
  return `${state.key} ${state.saved_at}`;
}

/**
 * The offers on screen, as (``offerKey``, ``stateStamp``) pairs, that no longer hold: their
 * state was restored, discarded or saved again since (from anywhere). Pure.
 */
export function withdrawnOffers(
  shown: Iterable<[string, string]>,
  states: ISavedState[]
): string[] {
  const open = new Set(
    states.filter(s => s.problem === null && s.restored_at === null).map(stateStamp)
  );
  return Array.from(shown)
    .filter(([, stamp]) => !open.has(stamp))
    .map(([key]) => key);
}

/** The question a restore asks when names of the state already hold values in the kernel. Pure. */
export function conflictQuestion(report: IRestoreReport): string {
  // "lr (yours 0.5, saved 0.1)": fracnb_meter.wording.conflict_line writes the same.
  const values = new Map((report.conflict_values ?? []).map(item => [item.name, item]));
  const names = report.conflicts
    .map(name => {
      const value = values.get(name);
      return value === undefined ? name : `${name} (yours ${value.kernel}, saved ${value.saved})`;
    })
    .join(', ');
  const verb = report.conflicts.length === 1 ? 'differs' : 'differ';
  // The values say which is which; without them (an older server), the line says where they differ.
  const where = values.size > 0 ? '' : ' between this kernel and the saved state';
  return `Nothing was restored yet: ${names} ${verb}${where}. Keep yours, or take the saved ones?`;
}

/** One line on what a restore did, for a notification. Pure. */
export function restoreResult(report: IRestoreReport): string {
  if (report.status === 'conflict') {
    return conflictQuestion(report);
  }
  if (report.status === 'restored' || report.status === 'partly_restored') {
    const count = report.restored.length;
    const parts = [
      `Restored ${count} ${count === 1 ? 'variable' : 'variables'} (${formatBytes(report.bytes)}).`
    ];
    const kept = report.conflicts.filter(name => !report.restored.includes(name));
    if (kept.length > 0) {
      parts.push(`Kept your own values of ${kept.join(', ')}.`);
    }
    if (report.reason) {
      parts.push(`${report.reason.charAt(0).toUpperCase()}${report.reason.slice(1)}.`);
    }
    if (report.failed.length > 0) {
      parts.push(`Not restored: ${report.failed.map(f => `${f.name} (${f.reason})`).join(', ')}.`);
    }
    parts.push(...report.notices);
    return parts.join(' ');
  }
  return report.reason ?? 'Nothing was restored.';
}

/** JupyterLab cuts a notification's message at this many characters, in the toast and the notification centre. */
export const NOTIFICATION_MAX = 140;

/** ``names`` joined within ``room`` characters: "big, small and 3 more". Pure. */
export function namesWithin(names: string[], room: number): string {
  for (let shown = names.length; shown > 0; shown--) {
    const more = names.length - shown;
    const text = names.slice(0, shown).join(', ') + (more > 0 ? ` and ${more} more` : '');
    if (text.length <= room) {
      return text;
    }
  }
  return `${names.length} ${names.length === 1 ? 'variable' : 'variables'}`;
}

/** ``text`` cut to ``NOTIFICATION_MAX`` characters, with an ellipsis where it was cut. Pure. */
export function withinNotification(text: string): string {
  return text.length <= NOTIFICATION_MAX ? text : `${text.slice(0, NOTIFICATION_MAX - 1)}…`;
}

/**
 * A restore's outcome within what a notification shows (``NOTIFICATION_MAX``), naming the variables
 * not restored: "Restored 3 of 5 variables (1.2 KiB). Not restored: big, small." ``restoreResult``
 * has the reasons (the notification's Details). Pure.
 */
export function restoreHeadline(report: IRestoreReport): string {
  const full = restoreResult(report);
  const done = report.status === 'restored' || report.status === 'partly_restored';
  if (full.length <= NOTIFICATION_MAX || !done) {
    return withinNotification(full);
  }
  const count = report.restored.length;
  const of = report.failed.length > 0 ? ` of ${count + report.failed.length}` : '';
  const head = `Restored ${count}${of} ${count + report.failed.length === 1 ? 'variable' : 'variables'} (${formatBytes(report.bytes)}).`;
  if (report.failed.length === 0) {
    return withinNotification(head);
  }
  const prefix = `${head} Not restored: `;
  return `${prefix}${namesWithin(
    report.failed.map(f => f.name),
    NOTIFICATION_MAX - prefix.length - 1
  )}.`;
}

/** What a damaged state has lost, by reason: "big, small (arrays.bin is cut short (1000 bytes))"; '' when nothing. Pure. */
export function lostText(state: ISavedState): string {
  const byReason = new Map<string, string[]>();
  for (const item of state.lost) {
    byReason.set(item.reason, [...(byReason.get(item.reason) ?? []), item.name]);
  }
  return Array.from(byReason, ([reason, names]) => `${names.join(', ')} (${reason})`).join('; ');
}

/** What one offer is: a state as saved at one moment, for one kernel. A newer save is another offer. */
export function offerKey(state: ISavedState, kernelId: string): string {
  return `${state.key} ${state.saved_at} ${kernelId}`;
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
    if (!offered.has(offerKey(state, kernelId))) {
      found.push({ state, kernelId });
    }
  }
  return found;
}
