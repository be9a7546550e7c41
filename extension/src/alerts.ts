/**
 * Which budget notifications should be on screen for one sample. Pure: no DOM, no toasts.
 *
 * Each budget user (the server, each kernel) is in one of three alert states: none,
 * critical (at or above 95 % of the budget) or over (above 100 %). A notification stays on
 * screen while its user is alerted and goes when memory drops back, so what the toasts say
 * is always true now.
 */
import { formatBytes } from './format';
import { budgetUsers, CRITICAL_SHARE, IOverBudget, REARM_SHARE } from './summary';
import type { Isolation, IUsage } from './usage';

export type AlertLevel = 'critical' | 'over';

export interface IAlert {
  user: IOverBudget;
  level: AlertLevel;
  message: string;
}

/** Above this share of the budget the user is over it. */
export const OVER_SHARE = 1;

/**
 * The alert level of one user, with hysteresis: once alerted, a user stays alerted until
 * its memory falls below 90 %, so memory hovering around 95 % does not flicker a toast.
 */
export function alertLevel(share: number, previous: AlertLevel | undefined): AlertLevel | null {
  if (share > OVER_SHARE) {
    return 'over';
  }
  if (share >= CRITICAL_SHARE || (previous !== undefined && share >= REARM_SHARE)) {
    return 'critical';
  }
  return null;
}

/** Whether others' memory is at stake when this server goes over its budget. */
function sharesTheDevice(isolation: Isolation | null): boolean {
  return isolation === null || isolation === 'none' || isolation === 'per-process';
}

/** JupyterLab cuts toasts at 140 characters. */
export const TOAST_LIMIT = 140;

function messageFor(
  label: string,
  user: IOverBudget,
  level: AlertLevel,
  isolation: Isolation | null
): string {
  const percent = Math.round((user.bytes / user.budget) * 100);
  const used = `${label} uses ${formatBytes(user.bytes)}, ${percent}\u00a0% of your ${formatBytes(user.budget)} budget.`;
  if (level === 'critical') {
    return `${used} Free some to avoid out-of-memory errors.`;
  }
  return sharesTheDevice(isolation)
    ? `Over budget: ${used} On a shared GPU that is your neighbours' memory: free some.`
    : `Over budget: ${used} Free some now.`;
}

/** The toast's text; a long notebook path is shortened to its file name, then cut. */
export function alertMessage(
  user: IOverBudget,
  level: AlertLevel,
  isolation: Isolation | null
): string {
  const full = messageFor(user.label, user, level, isolation);
  if (full.length <= TOAST_LIMIT) {
    return full;
  }
  const name = user.label.split('/').pop() ?? user.label;
  const short = messageFor(name, user, level, isolation);
  const excess = short.length - TOAST_LIMIT;
  return excess <= 0
    ? short
    : messageFor(
        `${name.slice(0, Math.max(1, name.length - excess - 1))}\u2026`,
        user,
        level,
        isolation
      );
}

/**
 * The alerts for ``usage`` given the levels of the previous sample (by user key), and the
 * levels to remember. When a kernel is alerted, the server's own alert is left out: its
 * total is mostly that kernel, and one notification says it all.
 */
export function budgetAlerts(
  usage: IUsage,
  previous: ReadonlyMap<string, AlertLevel>
): { alerts: IAlert[]; levels: Map<string, AlertLevel> } {
  const levels = new Map<string, AlertLevel>();
  const alerts: IAlert[] = [];
  for (const user of budgetUsers(usage)) {
    const level = alertLevel(user.bytes / user.budget, previous.get(user.key));
    if (level !== null) {
      levels.set(user.key, level);
      alerts.push({ user, level, message: alertMessage(user, level, usage.budget.isolation) });
    }
  }
  const kernelAlerted = alerts.some(alert => alert.user.key !== 'server');
  return {
    alerts: kernelAlerted ? alerts.filter(alert => alert.user.key !== 'server') : alerts,
    levels
  };
}
