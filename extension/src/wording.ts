/**
 * Wording for the panel and the notifications: the budget's, and the culling warning
 * (fracnb_meter/wording.py writes the same; test-data/cull-warnings.json holds both to it).
 * Pure: no DOM.
 */
import { clockTime, formatBytes, formatDuration, formatMinutes } from './format';
import { budgetBytes, minutesLeft } from './summary';
import type { IBudget, ICullStatus, IDeadline, IUsage } from './usage';

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

export { clockTime, zoneName } from './format';

/** The warning for a deadline of the hub's culling status, or null when none is due. */
export function cullWarning(deadline: IDeadline | null, timeZone?: string): string | null {
  if (deadline === null || !deadline.warning) {
    return null;
  }
  // Said only where the service will ask the server to save first (the deadline's saves_variables).
  const saved = deadline.saves_variables ? ' Its variables will be saved for your next start.' : '';
  if (deadline.reason === 'demand') {
    const at = clockTime(new Date(deadline.cull_at), timeZone);
    return `Someone is waiting for a GPU; this idle server stops at ${at} unless you use it.${saved}`;
  }
  const minutes = minutesLeft(deadline);
  // "in 4 minutes", but "in 8 h" rather than "in 480 minutes".
  const when =
    minutes < 60
      ? `in ${minutes} ${minutes === 1 ? 'minute' : 'minutes'}`
      : `in ${formatMinutes(minutes)}`;
  if (deadline.reason === 'idle') {
    return `Idle: this server will be stopped ${when} unless you use it.${saved}`;
  }
  if (deadline.reason === 'gpu-unused') {
    return `GPU unused: this idle server will be stopped ${when} unless it uses the GPU.${saved}`;
  }
  if (deadline.reason === 'gpu-unused-busy') {
    return `GPU unused: this server will be stopped ${when}, even while a cell runs, unless it uses the GPU. Save your work.`;
  }
  // At its maximum age a busy kernel is stopped too, and a busy kernel cannot be saved.
  const after = saved ? " Its idle kernels' variables will be saved." : ' Save your work.';
  return `This server reaches its maximum age and will be stopped ${when}, even if in use.${after}`;
}

/**
 * "This server holds 18 GiB of GPU memory but has not used the GPU for 1 h.": a busy server
 * whose GPU has been unused for its profile's GPU-unused timeout is warned, not stopped
 * (service-me.schema.json cullStatus.gpu_unused); null when that does not apply.
 */
export function gpuUnusedWarning(cull: ICullStatus | null): string | null {
  const unused = cull?.gpu_unused;
  if (unused === undefined) {
    return null;
  }
  const held =
    unused.gpu_memory_bytes === null || unused.gpu_memory_bytes <= 0
      ? 'a GPU share'
      : `${formatBytes(unused.gpu_memory_bytes)} of GPU memory`;
  const time =
    unused.seconds < 60
      ? formatDuration(unused.seconds)
      : formatMinutes(Math.floor(unused.seconds / 60));
  return `This server holds ${held} but has not used the GPU for ${time}.`;
}

/** The culling warning for a notification, or null when none is due. */
export function cullMessage(usage: IUsage): string | null {
  return cullWarning(usage.cull?.deadline ?? null) ?? gpuUnusedWarning(usage.cull);
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

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** The calendar day of ``moment`` in ``timeZone``: [year, month 0-11, day]. */
function dayOf(moment: Date, timeZone?: string): [number, number, number] {
  const parts = new Intl.DateTimeFormat('en-US', {
    year: 'numeric',
    month: 'numeric',
    day: 'numeric',
    timeZone
  }).formatToParts(moment);
  const part = (type: string) => Number(parts.find(p => p.type === type)?.value ?? 0);
  return [part('year'), part('month') - 1, part('day')];
}

/**
 * "14:05 EST" in ``timeZone`` (default: the browser's), with the day when it was not today:
 * "24 Nov 14:05 EST" (fracnb_meter.wording.saved_when writes the same).
 */
export function savedWhen(savedAt: Date, now: Date, timeZone?: string): string {
  const [year, month, day] = dayOf(savedAt, timeZone);
  const today = dayOf(now, timeZone);
  const sameDay = year === today[0] && month === today[1] && day === today[2];
  const date = sameDay ? '' : `${day} ${MONTHS[month]} `;
  return `${date}${clockTime(savedAt, timeZone)}`;
}

/**
 * "Restore variables from 14:05 EST (3.2 GiB)", with the day when it was not today: "from 24 Nov
 * 14:05 EST" (fracnb_meter.wording.restore_offer writes the same; test-data/restore-offers.json).
 */
export function restoreOffer(savedAt: Date, bytes: number, now: Date, timeZone?: string): string {
  return `Restore variables from ${savedWhen(savedAt, now, timeZone)} (${formatBytes(bytes)})`;
}
