/**
 * Pure functions from a usage sample to what the UI shows. No DOM, no I/O.
 */
import type { IUsageState } from './model';
import { failureText, SERVER_NOT_RUNNING, stopNoticeOf } from './stopped';
import type {
  IBudget,
  ICullStatus,
  IDeadline,
  IGPUAmount,
  IGpu,
  IKernelUsage,
  ILimited,
  IQuota,
  IUsage,
  UserLimit
} from './usage';

const GIB = 1024 ** 3;

/** Share of the limit at which the meter turns amber. */
export const WARNING_SHARE = 0.8;
/** Share of the limit at which the meter turns red and a notification is raised. */
export const CRITICAL_SHARE = 0.95;
/**
 * A crossing re-arms only once usage falls below this share, so memory hovering
 * around 95 % does not raise a notification on every poll.
 */
export const REARM_SHARE = 0.9;

/** 'over': above 100 % of the budget, a state of its own (on a shared GPU, others' memory). */
export type Level = 'normal' | 'warning' | 'critical' | 'over' | 'unavailable';

export interface IMeterSummary {
  /** The status bar text, e.g. "GPU 3.1 / 20 GiB". */
  text: string;
  /** A longer sentence for the tooltip. */
  title: string;
  level: Level;
  /** used / limit, or null when either is unknown. */
  share: number | null;
}

/** Bytes as GiB with at most one decimal: 3.1, 20, 0.2. */
export function formatGiB(bytes: number): string {
  const value = Math.round((bytes / GIB) * 10) / 10;
  return Number.isInteger(value) ? value.toFixed(0) : value.toFixed(1);
}

/** Bytes with a unit, for lists: "1.5 GiB", "300 MiB". */
export function formatBytes(bytes: number): string {
  if (bytes >= GIB) {
    return `${formatGiB(bytes)} GiB`;
  }
  return `${Math.round(bytes / 1024 ** 2)} MiB`;
}

export function levelOf(share: number | null): Level {
  if (share === null) {
    return 'normal';
  }
  if (share > 1) {
    return 'over';
  }
  if (share >= CRITICAL_SHARE) {
    return 'critical';
  }
  return share >= WARNING_SHARE ? 'warning' : 'normal';
}

/** The budget in bytes, or null when the server runs without one (a workstation). */
export function budgetBytes(budget: IBudget): number | null {
  const bytes = budget.memory_bytes;
  return bytes !== null && bytes > 0 ? bytes : null;
}

export function deviceTotalBytes(gpus: IGpu[]): number {
  return gpus.reduce((sum, gpu) => sum + gpu.memory_total_bytes, 0);
}

export function deviceUsedBytes(gpus: IGpu[]): number {
  return gpus.reduce((sum, gpu) => sum + gpu.memory_used_bytes, 0);
}

/**
 * Without per-process figures only the whole device is known, which may include other
 * users: show it against the device, marked with "*", never against the budget.
 */
function summarizeDevice(usage: IUsage, budget: number | null): IMeterSummary {
  const used = deviceUsedBytes(usage.gpus);
  const total = deviceTotalBytes(usage.gpus);
  const share = total > 0 ? used / total : null;
  const budgetNote = budget === null ? '' : ` Your budget is ${formatBytes(budget)}.`;
  return {
    text: `GPU ${formatGiB(used)} / ${formatGiB(total)} GiB*`,
    title:
      `* Whole device: ${formatBytes(used)} of ${formatBytes(total)} in use by all processes.` +
      `${budgetNote} ${usage.reason ?? 'Per-process GPU memory is not available.'}`,
    level: levelOf(share),
    share
  };
}

/** What the status bar shows for one sample. */
export function summarize(usage: IUsage): IMeterSummary {
  if (usage.budget.backend === 'none') {
    return {
      text: 'No GPU',
      title: usage.reason ?? 'No GPU for this server: it was started with a CPU-only profile.',
      level: 'unavailable',
      share: null
    };
  }
  if (!usage.available || usage.gpus.length === 0) {
    return {
      text: 'GPU –',
      title: usage.reason ?? 'No GPU is visible to this server.',
      level: 'unavailable',
      share: null
    };
  }
  const budget = budgetBytes(usage.budget);
  const serverBytes = usage.server.gpu_memory_bytes;
  if (serverBytes === null) {
    return summarizeDevice(usage, budget);
  }
  const limit = budget ?? deviceTotalBytes(usage.gpus);
  const limitWord = budget === null ? 'of the device memory' : 'of your GPU memory budget';
  const share = limit > 0 ? serverBytes / limit : null;
  const percent = share === null ? '' : ` (${Math.round(share * 100)}\u00a0%)`;
  const level = levelOf(share);
  const over = level === 'over' && budget !== null ? ` ${overBudgetNote(usage.budget)}` : '';
  return {
    text: `GPU ${formatGiB(serverBytes)} / ${formatGiB(limit)} GiB`,
    title: `This server's kernels use ${formatBytes(serverBytes)}${percent} ${limitWord} of ${formatBytes(limit)}.${over}`,
    level,
    share
  };
}

/** What going over the budget means, by who enforces it. */
export function overBudgetNote(budget: IBudget): string {
  if (budget.isolation === 'hard' || budget.isolation === 'enforced') {
    return 'Over budget: allocations beyond it will fail.';
  }
  return "Over budget: on a shared GPU you are now using your neighbours' memory. Free some now.";
}

/** The summary of a poller state, including "not answered yet" and "request failed". */
export function summarizeState(state: IUsageState): IMeterSummary {
  if (state.error !== null) {
    if (state.errorStatus === SERVER_NOT_RUNNING) {
      const notice = stopNoticeOf(state);
      return {
        text: 'Server stopped',
        title: `${notice.headline} ${notice.consequences}`,
        level: 'unavailable',
        share: null
      };
    }
    return {
      text: 'GPU –',
      title: failureText(state.errorStatus),
      level: 'unavailable',
      share: null
    };
  }
  if (state.usage === null) {
    return { text: 'GPU …', title: 'Reading GPU usage…', level: 'unavailable', share: null };
  }
  return summarize(state.usage);
}

/** The name a person recognises a kernel by: its notebook, else its kernel name. */
export function kernelLabel(kernel: IKernelUsage): string {
  return kernel.path || kernel.session_name || `${kernel.name} kernel ${kernel.id.slice(0, 8)}`;
}

/** Kernels grouped for display: by notebook path, biggest GPU user first within ties. */
export function sortKernels(kernels: IKernelUsage[]): IKernelUsage[] {
  return [...kernels].sort((a, b) => {
    const byLabel = kernelLabel(a).localeCompare(kernelLabel(b));
    return byLabel !== 0 ? byLabel : (b.gpu_memory_bytes ?? 0) - (a.gpu_memory_bytes ?? 0);
  });
}

export interface IOverBudget {
  /** "server" or "kernel:<id>". */
  key: string;
  label: string;
  bytes: number;
  budget: number;
}

/** The server and each kernel, with their share of the budget; empty without a budget. */
export function budgetUsers(usage: IUsage): IOverBudget[] {
  const budget = budgetBytes(usage.budget);
  if (budget === null || !usage.available) {
    return [];
  }
  const users: IOverBudget[] = [];
  if (usage.server.gpu_memory_bytes !== null) {
    users.push({
      key: 'server',
      label: 'This server',
      bytes: usage.server.gpu_memory_bytes,
      budget
    });
  }
  for (const kernel of usage.kernels) {
    if (kernel.gpu_memory_bytes !== null) {
      users.push({
        key: `kernel:${kernel.id}`,
        label: kernelLabel(kernel),
        bytes: kernel.gpu_memory_bytes,
        budget
      });
    }
  }
  return users;
}

/**
 * A share of GPUs, in the one style used everywhere (panel, status bar, widget, quotas):
 * 0.25 -> "0.25 GPU", 1 -> "1 GPU", 2 -> "2 GPUs", 0 -> "no GPU". Decimals, because
 * quota sums such as 5.75 have no short fraction.
 */
export function formatFraction(fraction: number): string {
  if (fraction <= 0) {
    return 'no GPU';
  }
  return `${formatAmount(fraction)} ${fraction > 1 ? 'GPUs' : 'GPU'}`;
}

/** An amount of GPUs, at most three decimals: "0.75", "5.75", "0.333", "2". */
export function formatAmount(gpus: number): string {
  return String(Math.round(gpus * 1000) / 1000);
}

function gpusUnit(gpus: number): string {
  return gpus === 1 ? 'GPU' : 'GPUs';
}

/** One quota line: "0.25 of 1 GPU", "0.25 GPUs, unlimited" or "0.25 GPUs, no quota". */
export function quotaText(used: IGPUAmount, limit: UserLimit | ILimited): string {
  switch (limit.state) {
    case 'limited':
      return `${formatAmount(used.gpus)} of ${formatAmount(limit.gpus)} ${gpusUnit(limit.gpus)}`;
    case 'unlimited':
      return `${formatAmount(used.gpus)} ${gpusUnit(used.gpus)}, unlimited`;
    case 'none':
      return `${formatAmount(used.gpus)} ${gpusUnit(used.gpus)}, no quota`;
  }
}

/** The quota section's rows: the user, then each group that has a quota. */
export function quotaRows(quota: IQuota): Array<[string, string]> {
  return [
    ['You', quotaText(quota.user.used, quota.user.limit)],
    ...quota.groups.map((group): [string, string] => [
      group.name,
      quotaText(group.used, group.limit)
    ])
  ];
}

/** Whole minutes as "45 min", "2 h" or "1 h 30 min". */
export function formatMinutes(minutes: number): string {
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return rest === 0 ? `${hours} h` : `${hours} h ${rest} min`;
}

/** A configured duration: "30 s", "30 min", "8 h". */
export function formatDuration(seconds: number): string {
  return seconds < 60 ? `${Math.round(seconds)} s` : formatMinutes(Math.round(seconds / 60));
}

/**
 * Whole minutes until a deadline, rounded up and at least 1: the server stops at the
 * first culling pass after the deadline, never before it.
 */
export function minutesLeft(deadline: IDeadline): number {
  return Math.max(1, Math.ceil(deadline.seconds_left / 60));
}

/** The automatic shutdown section's rows, for every state of the hub's culling status. */
export function cullRows(cull: ICullStatus): Array<[string, string]> {
  const idle = cull.idle_timeout_seconds;
  const maxAge = cull.max_age_seconds;
  const rows: Array<[string, string]> = [
    [
      'When idle',
      idle > 0 ? `stops after ${formatDuration(idle)} without activity` : 'never stopped'
    ],
    ['Maximum age', maxAge > 0 ? `${formatDuration(maxAge)} after start` : 'none']
  ];
  const deadline = cull.deadline;
  if (deadline === null) {
    rows.push(['Next stop', 'none scheduled']);
  } else if (deadline.reason === 'idle') {
    rows.push(['Stops in', `${formatMinutes(minutesLeft(deadline))} unless used`]);
  } else if (deadline.reason === 'demand') {
    rows.push([
      'Stops in',
      `${formatMinutes(minutesLeft(deadline))} unless used: someone is waiting for a GPU`
    ]);
  } else {
    rows.push([
      'Stops in',
      `${formatMinutes(minutesLeft(deadline))} at its maximum age, even if used`
    ]);
  }
  return rows;
}
