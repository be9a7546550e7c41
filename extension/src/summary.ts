/**
 * Pure functions from a usage sample to what the UI shows. No DOM, no I/O.
 */
import {
  formatBytes,
  formatDuration,
  formatGiB,
  formatGpus,
  formatMinutes,
  formatUse
} from './format';
import type { IUsageState } from './model';
import { failureText, serverGone, stopNoticeOf } from './stopped';
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
    if (serverGone(state)) {
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

/** One quota line: "0.25 of 1 GPU", "0.25 GPU, unlimited" or "0 GPUs, no quota". */
export function quotaText(used: IGPUAmount, limit: UserLimit | ILimited): string {
  switch (limit.state) {
    case 'limited':
      return formatUse(used.gpus, limit.gpus);
    case 'unlimited':
      return `${formatGpus(used.gpus)}, unlimited`;
    case 'none':
      return `${formatGpus(used.gpus)}, no quota`;
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

/**
 * Whole minutes until a deadline, rounded up and at least 1: the server stops at the
 * first culling pass after the deadline, never before it.
 */
export function minutesLeft(deadline: IDeadline): number {
  return Math.max(1, Math.ceil(deadline.seconds_left / 60));
}

/**
 * The automatic shutdown section's rows, for every state of the hub's culling status. ``running``: a
 * kernel is running a cell, which is use: an idle deadline moves on with it and never comes, so none is
 * shown.
 */
export function cullRows(cull: ICullStatus, running = false): Array<[string, string]> {
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
  if (
    running &&
    (deadline === null || deadline.reason === 'idle' || deadline.reason === 'demand')
  ) {
    rows.push(['Next stop', 'none while in use: a cell is running']);
  } else if (deadline === null) {
    rows.push(['Next stop', 'none scheduled']);
  } else if (deadline.reason === 'idle') {
    rows.push(['Stops in', `${formatMinutes(minutesLeft(deadline))} unless used`]);
  } else if (deadline.reason === 'demand') {
    rows.push([
      'Stops in',
      `${formatMinutes(minutesLeft(deadline))} unless used: someone is waiting for a GPU`
    ]);
  } else if (deadline.reason === 'gpu-unused' || deadline.reason === 'gpu-unused-busy') {
    const even = deadline.reason === 'gpu-unused-busy' ? ', even while a cell runs,' : '';
    rows.push([
      'Stops in',
      `${formatMinutes(minutesLeft(deadline))}${even} unless it uses the GPU`
    ]);
  } else {
    rows.push([
      'Stops in',
      `${formatMinutes(minutesLeft(deadline))} at its maximum age, even if used`
    ]);
  }
  if (deadline?.saves_variables) {
    // The hub's service asks this server to save before that stop (service-me.schema.json).
    rows.push(['At that stop', "its idle kernels' variables are saved for your next start"]);
  }
  return rows;
}
