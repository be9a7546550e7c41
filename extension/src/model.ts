/**
 * One poller of the usage API shared by the status bar item, the panel and the notifier.
 */
import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { fetchUsage, UsageRequestError } from './request';
import type { IHibernationReport, IUsage } from './usage';

/** Poll interval when the settings say nothing, in milliseconds. */
export const DEFAULT_REFRESH_MS = 1000;
/** Longest back-off after failed requests, in milliseconds. */
const MAX_BACKOFF_MS = 60_000;

/**
 * The jupyter_server event the meter emits with a hibernation's report
 * (fracnb_meter.hibernation.notice.HIBERNATED_EVENT): a stop its user asked for reaches no poll
 * (JupyterHub takes the server off its proxy before the hub asks for the save), but the page's
 * event socket, open before, still carries it.
 */
export const HIBERNATED_EVENT = 'https://events.fracnb.io/fracnb_meter/hibernated/v1';

/**
 * The jupyter_server event the meter emits as its save at a stop begins (SIGTERM on a pod Kueue
 * manages: fracnb_meter.hibernation.notice.STOPPING_EVENT). The server takes no new requests from
 * then on, so the polls fail while it saves; the stop's notice follows (HIBERNATED_EVENT, stop
 * "kueue").
 */
export const STOPPING_EVENT = 'https://events.fracnb.io/fracnb_meter/stopping/v1';

/** Why the hub stopped the server, as it told the server when it asked for the hibernation. */
export type HibernationStop = NonNullable<IUsage['hibernation_stop']> | null;

export interface IUsageState {
  /** The latest successful sample, or null before the first one. */
  usage: IUsage | null;
  /** Why the latest request failed, or null when it succeeded. */
  error: string | null;
  /** The HTTP status of the failed request; null when it succeeded or had no answer. */
  errorStatus: number | null;
  /** When the latest sample arrived (ms, this browser's clock), or null before the first. */
  receivedAt: number | null;
  /** When requests began failing (ms, this browser's clock), or null while they succeed. */
  failingSince: number | null;
  /**
   * When the server said it is stopping (STOPPING_EVENT: ms, this browser's clock); null or absent
   * when it did not, or answered since.
   */
  stoppingSince?: number | null;
}

export class UsageModel {
  constructor(
    refreshMs: number = DEFAULT_REFRESH_MS,
    private readonly fetcher: () => Promise<IUsage> = () => fetchUsage(),
    private readonly clock: () => number = Date.now
  ) {
    this._poll = new Poll({
      factory: () => this._refresh(),
      frequency: { interval: refreshMs, backoff: true, max: MAX_BACKOFF_MS },
      name: '@fracnb/meter:usage',
      // Stop asking while the browser tab is hidden; resume on return.
      standby: 'when-hidden'
    });
  }

  get changed(): ISignal<this, IUsageState> {
    return this._changed;
  }

  get state(): IUsageState {
    return this._state;
  }

  get isDisposed(): boolean {
    return this._poll.isDisposed;
  }

  /** Change the poll interval (from the settings), keeping the back-off policy. */
  setRefreshInterval(refreshMs: number): void {
    this._poll.frequency = { ...this._poll.frequency, interval: refreshMs };
  }

  /** Ask for a sample now, e.g. when the panel is opened. */
  refresh(): Promise<void> {
    return this._poll.refresh();
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private async _refresh(): Promise<void> {
    try {
      const usage = await this.fetcher();
      this._update({
        usage,
        error: null,
        errorStatus: null,
        receivedAt: this.clock(),
        failingSince: null
      });
    } catch (error) {
      const status = error instanceof UsageRequestError ? error.status : null;
      this._update({
        ...this._state,
        error: String(error),
        errorStatus: status,
        failingSince: this._state.failingSince ?? this.clock()
      });
      // Rethrow so the poll backs off while the server is unreachable.
      throw error;
    }
  }

  /**
   * A hibernation's report from the server's events (HIBERNATED_EVENT), as its next document would carry it,
   * with why the hub is stopping the server (``stop``), when it said, and the hub's notice of a stop
   * Kueue made (``notice``).
   */
  tellHibernation(
    report: IHibernationReport,
    stop: HibernationStop = null,
    notice: string | null = null
  ): void {
    const usage = this._state.usage;
    if (usage !== null) {
      this._update({
        ...this._state,
        usage: { ...usage, hibernation: report, hibernation_stop: stop, stop_notice: notice }
      });
    }
  }

  /** The server said it is stopping (STOPPING_EVENT): its failing polls are that stop. */
  tellStopping(): void {
    this._update({ ...this._state, stoppingSince: this.clock() });
  }

  private _update(state: IUsageState): void {
    this._state = state;
    this._changed.emit(state);
  }

  private readonly _poll: Poll;
  private readonly _changed = new Signal<this, IUsageState>(this);
  private _state: IUsageState = {
    usage: null,
    error: null,
    errorStatus: null,
    receivedAt: null,
    failingSince: null
  };
}
