/**
 * Wording for the panel and the notifications: the budget's, and the culling warning
 * (fracnb_meter/wording.py writes the same; test-data/cull-warnings.json holds both to it).
 * Pure: no DOM.
 */
import { formatBytes, formatMinutes } from './format';
import { budgetBytes, minutesLeft } from './summary';
import type { IBudget, IDeadline, IUsage } from './usage';

/** The frameworks the spawner's soft cap reaches (docs/contract.md, FRACNB_SOFT_CAP_BYTES). */
export const SOFT_CAP_FRAMEWORKS = 'PyTorch, JAX and CuPy; TensorFlow through the startup hook';

/** "19 GiB (95 % of the budget) for PyTorch, ...", or null where no soft cap was set. */
export function softCapText(budget: IBudget): string | null {
  const cap = budget.soft_cap_bytes;
  const memory = budgetBytes(budget);
  if (cap === null || cap <= 0) {
    return budget.isolation === 'none' && memory !== null
      ? 'none: nothing stops you using more, so stay within your budget'
      : null;
  }
  const percent =
    memory === null ? '' : ` (${Math.round((cap / memory) * 100)}\u00a0% of the budget)`;
  return `${formatBytes(cap)}${percent} for ${SOFT_CAP_FRAMEWORKS}. Other code is not capped.`;
}

/** The device's name without a "simulated" mark when the badge says so already. */
export function deviceName(name: string, simulated: boolean): string {
  if (!simulated) {
    return name;
  }
  return name
    .replace(/\s*\(simulated\)\s*$/i, '')
    .replace(/^simulated\s+/i, '')
    .trim();
}

/**
 * "14:05 CET": the time of day on a 24-hour clock in ``timeZone`` (default: the browser's), with the
 * zone's abbreviation, as the hub's pages write their times ("14:05 UTC").
 */
export function clockTime(moment: Date, timeZone?: string): string {
  const time = new Intl.DateTimeFormat('en-GB', {
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
    timeZone
  }).format(moment);
  const zone = zoneName(moment, timeZone);
  return zone ? `${time} ${zone}` : time;
}

/**
 * The zone's short name: "UTC", "CET", "EST". British English names European zones, American English
 * American ones; where neither has a name, the offset ("GMT+5:30").
 */
export function zoneName(moment: Date, timeZone?: string): string {
  const names = ['en-GB', 'en-US'].map(
    locale =>
      new Intl.DateTimeFormat(locale, { timeZone, timeZoneName: 'short' })
        .formatToParts(moment)
        .find(part => part.type === 'timeZoneName')?.value ?? ''
  );
  return names.find(name => name !== '' && !/^GMT[+-]/.test(name)) ?? names[0];
}

/** The warning for a deadline of the hub's culling status, or null when none is due. */
export function cullWarning(deadline: IDeadline | null, timeZone?: string): string | null {
  if (deadline === null || !deadline.warning) {
    return null;
  }
  if (deadline.reason === 'demand') {
    const at = clockTime(new Date(deadline.cull_at), timeZone);
    return `Someone is waiting for a GPU; this idle server stops at ${at} unless you use it.`;
  }
  const minutes = minutesLeft(deadline);
  // "in 4 minutes", but "in 8 h" rather than "in 480 minutes".
  const when =
    minutes < 60
      ? `in ${minutes} ${minutes === 1 ? 'minute' : 'minutes'}`
      : `in ${formatMinutes(minutes)}`;
  if (deadline.reason === 'idle') {
    return `Idle: this server will be stopped ${when} unless you use it.`;
  }
  return `This server reaches its maximum age and will be stopped ${when}, even if in use. Save your work.`;
}

/** The culling warning for a notification, or null when none is due. */
export function cullMessage(usage: IUsage): string | null {
  return cullWarning(usage.cull?.deadline ?? null);
}

/**
 * "This session peaked at 6.1 GiB of 20 GiB.": the server's highest reading since it started
 * (the memory history's peak), against the budget; null before the first reading
 * (fracnb_meter/wording.py writes the same; test-data/session-peaks.json holds both to it).
 */
export function sessionPeakText(peakBytes: number | null, budget: number | null): string | null {
  if (peakBytes === null) {
    return null;
  }
  const against = budget === null ? '' : ` of ${formatBytes(budget)}`;
  return `This session peaked at ${formatBytes(peakBytes)}${against}.`;
}

/** The hub's advice for next time as it gives it, or null when it has nothing to say. */
export function adviceText(usage: IUsage): string | null {
  const advice = usage.advice;
  return advice === null || advice.state === 'none' ? null : advice.text;
}
