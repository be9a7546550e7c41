/**
 * The side panel: the server's total against the budget, each kernel by notebook,
 * the device(s), the budget terms and, when the hub provides them, quota and culling.
 */
import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import { sparklineElement } from './chart';
import { formatBytes, formatShare, zoneName } from './format';
import { gpuUnusedText } from './gpuunused';
import type { Hibernation } from './hibernation';
import { savedStatesView } from './savedstates';
import { CARRIED_NOTE } from './sparkline';
import { IUsageState, UsageModel } from './model';
import { serverGone, stopNoticeOf } from './stopped';
import { adviceText, deviceName, sessionPeakText, softCapText } from './wording';
import {
  budgetBytes,
  cullRows,
  kernelLabel,
  levelOf,
  overBudgetNote,
  quotaRows,
  sortKernels,
  summarizeState
} from './summary';
import type {
  IBudget,
  ICullStatus,
  IGpu,
  IKernelUsage,
  IMemorySeries,
  IQuota,
  IUsage,
  Isolation
} from './usage';

const GPU_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
  '<g class="jp-icon3" fill="#616161"><path d="M7 2h2v2h2V2h2v2h2V2h2v2h1a2 2 0 0 1 2 2v1h2v2h-2v2h2v2h-2v2h2v2h-2v1a2 2 0 0 1-2 2h-1v2h-2v-2h-2v2h-2v-2H9v2H7v-2H6a2 2 0 0 1-2-2v-1H2v-2h2v-2H2v-2h2V9H2V7h2V6a2 2 0 0 1 2-2h1zm-1 4v12h12V6zm2 2h8v8H8z"/></g>' +
  '</svg>';

export const gpuIcon = new LabIcon({ name: '@fracnb/meter:gpu', svgstr: GPU_SVG });

const ISOLATION_NOTES: Record<Isolation, string> = {
  hard: 'hard: the GPU partition enforces the budget',
  enforced: 'enforced: allocations beyond the budget fail',
  'per-process': 'per process: each process is capped, not the server as a whole',
  none: 'none: the GPU is shared and the driver enforces no limit'
};

type Child = Node | string | null;

/** Create an element with a class and children; text goes in as text, never as HTML. */
function el(tag: string, className: string, ...children: Child[]): HTMLElement {
  const node = document.createElement(tag);
  node.className = className;
  for (const child of children) {
    if (child !== null) {
      node.append(child);
    }
  }
  return node;
}

function meterBar(used: number, limit: number): HTMLElement {
  const share = limit > 0 ? used / limit : 0;
  const level = levelOf(share);
  const fill = el('div', `fracnb-meter-bar-fill fracnb-meter-${level}`);
  fill.style.width = `${Math.min(100, share * 100).toFixed(1)}%`;
  const bar = el('div', `fracnb-meter-bar fracnb-meter-bar-${level}`, fill);
  bar.setAttribute('role', 'meter');
  bar.setAttribute('aria-valuenow', String(Math.round(share * 100)));
  return bar;
}

/** The series' chart over the session, or nothing before its first reading. */
function historyChart(
  usage: IUsage,
  name: string,
  key: string,
  series: IMemorySeries | undefined,
  note: string | null = null
): SVGElement | null {
  if (usage.history === null || series === undefined || series.latest === null) {
    return null;
  }
  const budget = budgetBytes(usage.budget);
  const chart = sparklineElement(name, series, usage.history.now_s, budget, note);
  chart.dataset.series = key;
  return chart;
}

function section(title: string, ...children: Child[]): HTMLElement {
  return el(
    'section',
    'fracnb-meter-section',
    el('h3', 'fracnb-meter-heading', title),
    ...children
  );
}

function facts(rows: Array<[string, string | null]>): HTMLElement {
  const list = el('dl', 'fracnb-meter-facts');
  for (const [term, value] of rows) {
    if (value !== null) {
      list.append(el('dt', '', term), el('dd', '', value));
    }
  }
  return list;
}

function totalView(usage: IUsage): HTMLElement {
  const budget = budgetBytes(usage.budget);
  const server = usage.server.gpu_memory_bytes;
  const limit = budget ?? usage.gpus.reduce((sum, gpu) => sum + gpu.memory_total_bytes, 0);
  if (server === null) {
    return el('p', 'fracnb-meter-note', usage.reason ?? 'Per-process GPU memory is not available.');
  }
  // One unit style with the kernels' rows below: "0 B of 20 GiB budget", "512 MiB", "6 GiB".
  const against = budget === null ? 'on the device' : 'budget';
  const percent = limit > 0 ? ` · ${Math.round((server / limit) * 100)}\u00a0%` : '';
  const over =
    budget !== null && levelOf(server / budget) === 'over'
      ? el('p', 'fracnb-meter-over-note', overBudgetNote(usage.budget))
      : null;
  return el(
    'div',
    'fracnb-meter-total',
    el(
      'div',
      'fracnb-meter-total-text',
      el('span', 'fracnb-meter-total-used', formatBytes(server)),
      ` of ${formatBytes(limit)} ${against}${percent}`
    ),
    meterBar(server, limit),
    historyChart(usage, 'this server', 'server', usage.history?.server),
    over
  );
}

/** Opens a notebook by its server-relative path. */
export type PathOpener = (path: string) => void;

function kernelName(kernel: IKernelUsage, openPath: PathOpener | null): HTMLElement {
  const label = kernelLabel(kernel);
  const path = kernel.path;
  if (path === null || openPath === null) {
    return el('span', 'fracnb-meter-kernel-name', label);
  }
  const link = el('button', 'fracnb-meter-kernel-name fracnb-meter-link', label);
  link.addEventListener('click', () => openPath(path));
  return link;
}

/** "GPU unused for 42 min" under the kernel's name, or nothing (fracnb_meter.gpuunused). */
function unusedLine(kernel: IKernelUsage): HTMLElement | null {
  const text = gpuUnusedText(kernel.gpu_unused);
  return text === null
    ? null
    : el('div', 'fracnb-meter-kernel-detail fracnb-meter-kernel-unused', text);
}

function kernelRow(
  kernel: IKernelUsage,
  budget: number | null,
  openPath: PathOpener | null,
  chart: SVGElement | null
): HTMLElement {
  const bytes = kernel.gpu_memory_bytes;
  const memory = bytes === null ? 'unknown' : formatBytes(bytes);
  const row = el(
    'li',
    'fracnb-meter-kernel',
    el(
      'div',
      'fracnb-meter-kernel-line',
      kernelName(kernel, openPath),
      el('span', 'fracnb-meter-kernel-memory', memory)
    ),
    el(
      'div',
      'fracnb-meter-kernel-detail',
      `${kernel.name} · ${kernel.execution_state ?? 'unknown state'}` +
        (kernel.pid === null ? '' : ` · pid ${kernel.pid}`)
    ),
    unusedLine(kernel),
    bytes !== null && budget !== null ? meterBar(bytes, budget) : null,
    chart
  );
  row.dataset.kernelId = kernel.id;
  row.title = kernel.path ?? kernel.id;
  return row;
}

function kernelsView(usage: IUsage, openPath: PathOpener | null): HTMLElement {
  if (usage.kernels.length === 0) {
    return el('p', 'fracnb-meter-note', 'No kernels are running.');
  }
  const budget = budgetBytes(usage.budget);
  const list = el('ul', 'fracnb-meter-kernels');
  for (const kernel of sortKernels(usage.kernels)) {
    const kept = usage.history?.kernels.find(entry => entry.id === kernel.id);
    const note = kept?.carried_from ? CARRIED_NOTE : null;
    const chart = historyChart(usage, kernelLabel(kernel), kernel.id, kept?.series, note);
    list.append(kernelRow(kernel, budget, openPath, chart));
  }
  return list;
}

function deviceRow(gpu: IGpu, simulated: boolean): HTMLElement {
  const badge = simulated ? el('span', 'fracnb-meter-badge', 'simulated') : null;
  const mig = gpu.mig === null ? null : `MIG instance ${gpu.mig.gpu_instance_id}`;
  const utilization =
    gpu.utilization_percent === null ? null : `${gpu.utilization_percent}\u00a0% busy`;
  const detail = [
    `${formatBytes(gpu.memory_used_bytes)} of ${formatBytes(gpu.memory_total_bytes)} in use by all processes`,
    utilization,
    mig
  ].filter(part => part !== null);
  return el(
    'li',
    'fracnb-meter-device',
    el(
      'div',
      'fracnb-meter-device-name',
      `${gpu.index}: ${deviceName(gpu.name, simulated)}`,
      badge
    ),
    el('div', 'fracnb-meter-kernel-detail', detail.join(' · '))
  );
}

function budgetView(budget: IBudget): HTMLElement {
  if (budget.error) {
    return el('p', 'fracnb-meter-note', `The budget is unknown: ${budget.error}.`);
  }
  const profile = budget.profile_display_name ?? budget.profile;
  if (budget.backend === 'none') {
    return facts([
      ['Profile', profile],
      ['Share', 'no GPU (CPU only)']
    ]);
  }
  if (budgetBytes(budget) === null) {
    return el('p', 'fracnb-meter-note', 'No GPU budget is set for this server.');
  }
  const isolation = budget.isolation;
  return facts([
    ['Share', budget.fraction === null ? null : formatShare(budget.fraction)],
    ['Memory', budget.memory_bytes === null ? null : formatBytes(budget.memory_bytes)],
    ['Profile', profile],
    ['Sharing', budget.backend],
    ['Isolation', isolation === null ? null : ISOLATION_NOTES[isolation]],
    ['Memory cap', softCapText(budget)]
  ]);
}

/**
 * This session's peak and the hub's advice for the next one (from the user's own sessions,
 * as on the spawn form), or nothing before the first reading.
 */
function nextTimeView(usage: IUsage): HTMLElement | null {
  const peak = sessionPeakText(
    usage.history?.server.peak?.bytes ?? null,
    budgetBytes(usage.budget)
  );
  if (peak === null) {
    return null;
  }
  const advice = adviceText(usage);
  return section(
    'Next time',
    el('p', 'fracnb-meter-session-peak', peak),
    advice === null ? null : el('p', 'fracnb-meter-advice', advice)
  );
}

function quotaView(quota: IQuota): HTMLElement {
  // With Kueue, while the team runs on quota its cohort lent: that Kueue can preempt this server.
  const borrowing = quota.borrowing ?? null;
  return section(
    'Quota',
    facts(quotaRows(quota)),
    borrowing === null ? null : el('p', 'fracnb-meter-note fracnb-meter-borrowing', borrowing)
  );
}

function cullView(cull: ICullStatus, usage: IUsage): HTMLElement {
  const running = usage.kernels.some(kernel => kernel.execution_state === 'busy');
  const view = section('Automatic shutdown', facts(cullRows(cull, running)));
  view.classList.toggle('fracnb-meter-cull-warning', cull.deadline?.warning ?? false);
  return view;
}

/** Above the hibernation's lines in the stopped view (the consequences say the same with the lines). */
const SAVED_NOTE =
  'Your saved files are kept. Before the stop, the kernels were asked to save their variables:';

/** The server stopped (the hub answers for it): why, what was kept and lost, where to go. */
function stoppedView(state: IUsageState, hubHome: string | null): HTMLElement {
  const notice = stopNoticeOf(state);
  const link = hubHome === null ? null : document.createElement('a');
  if (link !== null && hubHome !== null) {
    link.className = 'fracnb-meter-hub-link';
    link.href = hubHome;
    // After Kueue's stop, starting again is a new request in Kueue's queue: the link says so.
    link.textContent =
      notice.cause === 'kueue'
        ? "Start it again from the hub home page (it waits in Kueue's queue for a GPU)"
        : 'Start it again from the hub home page';
  }
  const view = el(
    'div',
    'fracnb-meter-body fracnb-meter-stopped',
    section(
      'Server stopped',
      el('p', 'fracnb-meter-stopped-headline', notice.headline),
      ...(notice.saved.length > 0 || notice.consequences
        ? [el('p', 'fracnb-meter-note', notice.saved.length > 0 ? SAVED_NOTE : notice.consequences)]
        : []),
      ...notice.saved.map(line =>
        el('p', 'fracnb-meter-note fracnb-meter-stopped-saved', ...withCode(line))
      ),
      link === null
        ? el('p', 'fracnb-meter-note', 'Start the server again to go on working.')
        : el('p', '', link)
    )
  );
  view.dataset.cause = notice.cause;
  return view;
}

/**
 * A line whose `names` are marked with backticks (a variable's name in a hibernation line), as
 * text and <code> elements: the backticks themselves are never shown.
 */
export function withCode(line: string): Node[] {
  return line.split(/`([^`]+)`/).map((part, index) => {
    if (index % 2 === 0) {
      return document.createTextNode(part);
    }
    const code = document.createElement('code');
    code.textContent = part;
    return code;
  });
}

/** The whole panel body for one poller state. */
export function renderUsage(
  state: IUsageState,
  openPath: PathOpener | null = null,
  hubHome: string | null = null
): HTMLElement {
  const usage = state.usage;
  const summary = summarizeState(state);
  if (serverGone(state)) {
    return stoppedView(state, hubHome);
  }
  if (usage === null || state.error !== null || !usage.available) {
    // After a failed request the last sample is stale: show only the reason.
    const current = state.error === null ? usage : null;
    return el(
      'div',
      'fracnb-meter-body',
      section('GPU memory', el('p', 'fracnb-meter-note fracnb-meter-reason', summary.title)),
      current === null ? null : section('Kernels', kernelsView(current, openPath)),
      current === null ? null : section('Budget', budgetView(current.budget)),
      current === null || current.quota === null ? null : quotaView(current.quota),
      current === null || current.cull === null ? null : cullView(current.cull, current)
    );
  }
  return el(
    'div',
    'fracnb-meter-body',
    section('GPU memory', totalView(usage)),
    nextTimeView(usage),
    section('Kernels', kernelsView(usage, openPath)),
    section('Budget', budgetView(usage.budget)),
    usage.quota === null ? null : quotaView(usage.quota),
    usage.cull === null ? null : cullView(usage.cull, usage),
    section(
      usage.gpus.length === 1 ? 'Device' : 'Devices',
      el('ul', 'fracnb-meter-devices', ...usage.gpus.map(gpu => deviceRow(gpu, usage.simulated)))
    )
  );
}

/** "Sampled 10:00:01 EST", in the browser's zone, or nothing before the first sample. */
export function sampledText(state: IUsageState, timeZone?: string): string {
  const usage = state.usage;
  if (usage === null || state.error !== null) {
    return '';
  }
  const moment = new Date(usage.sampled_at);
  const time = new Intl.DateTimeFormat('en-GB', {
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
    hourCycle: 'h23',
    timeZone
  }).format(moment);
  return `Sampled ${time} ${zoneName(moment, timeZone)}`;
}

export class MeterPanel extends Widget {
  constructor(
    private readonly model: UsageModel,
    private readonly openPath: PathOpener | null = null,
    private readonly hubHome: string | null = null,
    private readonly hibernation: Hibernation | null = null
  ) {
    super();
    this.id = 'fracnb-meter-panel';
    this.addClass('fracnb-meter-panel');
    this.title.icon = gpuIcon;
    this.title.caption = 'GPU usage';
    this.node.appendChild(this._sampled);
    model.changed.connect(this._render, this);
    hibernation?.changed.connect(this._renderSaved, this);
    this._render();
    this._renderSaved();
  }

  dispose(): void {
    this.model.changed.disconnect(this._render, this);
    this.hibernation?.changed.disconnect(this._renderSaved, this);
    super.dispose();
  }

  /** The saved states, below the rest (redrawn when they change, not on every usage sample). */
  private _renderSaved(): void {
    const view = this.hibernation === null ? null : savedStatesView(this.hibernation);
    this._saved?.remove();
    this._saved = view;
    if (view !== null) {
      this.node.appendChild(view);
    }
  }

  protected onAfterShow(): void {
    this._render();
    void this.model.refresh();
    void this.hibernation?.refresh(); // a restore or discard from the widget or the magic since
  }

  private _render(): void {
    // A hidden panel is redrawn when shown; skip the DOM work meanwhile.
    if (!this.isVisible && this._body !== null) {
      return;
    }
    const body = renderUsage(this.model.state, this.openPath, this.hubHome);
    // Replace the DOM only when something changed, so a click or hover on a row is
    // not lost to a redraw that shows the same numbers.
    if (this._body === null || this._body.outerHTML !== body.outerHTML) {
      this._body?.remove();
      this.node.insertBefore(body, this._sampled);
      this._body = body;
    }
    this._sampled.textContent = sampledText(this.model.state);
  }

  private _body: HTMLElement | null = null;
  private _saved: HTMLElement | null = null;
  private readonly _sampled = el('p', 'fracnb-meter-sampled');
}
