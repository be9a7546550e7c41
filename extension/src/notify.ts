/**
 * JupyterLab notifications: a kernel or the server at 95 % of the GPU memory budget, or
 * over it (each on screen while it holds, withdrawn when memory drops); the culling
 * warning (once per deadline, withdrawn when it no longer holds); and, when the hub says
 * the server is not running, why it stopped and where to start it again.
 */
import { Notification } from '@jupyterlab/apputils';

import { AlertLevel, budgetAlerts, IAlert } from './alerts';
import { IUsageState, UsageModel } from './model';
import { serverGone, type StopCause, stopNoticeOf } from './stopped';
import { cullMessage } from './wording';

export class BudgetNotifier {
  constructor(
    private readonly model: UsageModel,
    private readonly openPanel: () => void,
    private readonly hubHome: string | null,
    private readonly openPaths: () => string[] = () => []
  ) {
    model.changed.connect(this._onChanged, this);
  }

  /** Turning notifications off withdraws them, so turning them on re-alerts. */
  set enabled(value: boolean) {
    this._enabled = value;
    if (!value) {
      this._levels = new Map();
      this._showAlerts([]);
      this._cullKey = null;
      this._dismiss(this._cullToast);
      this._cullToast = null;
    }
  }

  dispose(): void {
    this.model.changed.disconnect(this._onChanged, this);
  }

  private _onChanged(_: UsageModel, state: IUsageState): void {
    if (!this._enabled) {
      return;
    }
    if (state.error !== null) {
      // Whatever the last sample said no longer holds: the server does not answer.
      this._levels = new Map();
      this._showAlerts([]);
      this._warnOfCulling(null, null);
      if (serverGone(state)) {
        this._announceStop(state);
      }
      return;
    }
    if (state.usage === null) {
      return;
    }
    this._dismiss(this._stopToast);
    this._stopToast = null;
    const { alerts, levels } = budgetAlerts(state.usage, this._levels);
    this._levels = levels;
    this._showAlerts(alerts);
    const deadline = state.usage.cull?.deadline ?? null;
    const message = cullMessage(state.usage);
    // A new time or a new reason is a new deadline; a GPU-unused warning without one is one toast.
    const key =
      message === null
        ? null
        : deadline?.warning
          ? `${deadline.reason} ${deadline.cull_at}`
          : 'gpu-unused';
    this._warnOfCulling(key, message);
  }

  /**
   * One toast per alerted user, withdrawn when the alert ends. A change of level replaces
   * the toast (a new one, in the new level's colours) rather than editing it in place.
   */
  private _showAlerts(alerts: IAlert[]): void {
    const wanted = new Map(alerts.map(alert => [alert.user.key, alert]));
    for (const [key, shown] of this._alertToasts) {
      if (wanted.get(key)?.level !== shown.level) {
        this._dismiss(shown.id);
        this._alertToasts.delete(key);
      }
    }
    for (const [key, alert] of wanted) {
      if (!this._alertToasts.has(key)) {
        const id = Notification.emit(alert.message, toastType(alert.level), {
          autoClose: false,
          actions: this._panelAction()
        });
        this._alertToasts.set(key, { id, level: alert.level });
      }
    }
  }

  private _panelAction(): Notification.IAction[] {
    return [{ label: 'Show GPU usage', callback: this.openPanel }];
  }

  private _announceStop(state: IUsageState): void {
    const notice = stopNoticeOf(state, this.openPaths());
    if (this._stopToast !== null) {
      // A report that came after the first failed poll (the server's event): the toast says it.
      if (notice.toast !== this._stopText) {
        this._stopText = notice.toast;
        Notification.update({
          id: this._stopToast,
          message: notice.toast,
          autoClose: false,
          actions: this._startAgain(notice.cause)
        });
      }
      return;
    }
    this._stopText = notice.toast;
    this._stopToast = Notification.info(notice.toast, {
      autoClose: false,
      actions: this._startAgain(notice.cause)
    });
  }

  /**
   * The toast's button to the hub home, where the server starts again (none outside JupyterHub).
   * After Kueue's stop, starting again waits in Kueue's queue: the button says so.
   */
  private _startAgain(cause: StopCause): Notification.IAction[] {
    const hubHome = this.hubHome;
    const kueue = cause === 'kueue' || cause === 'stopping';
    return hubHome === null
      ? []
      : [
          {
            label: kueue ? "Start again (waits in Kueue's queue)" : 'Start it again',
            caption: kueue
              ? "Open the hub home page, where starting your server again queues for a GPU in Kueue's queue"
              : 'Open the hub home page, where you can start your server',
            callback: () => window.location.assign(hubHome)
          }
        ];
  }

  /**
   * One toast per deadline in warning. It goes when the deadline moves (the user was
   * active) or the warning ends: it would announce a shutdown that is no longer due.
   */
  private _warnOfCulling(key: string | null, message: string | null): void {
    if (key === this._cullKey) {
      return;
    }
    this._dismiss(this._cullToast);
    this._cullToast = null;
    this._cullKey = key;
    if (message !== null) {
      this._cullToast = Notification.warning(message, { autoClose: false });
    }
  }

  private _dismiss(id: string | null): void {
    if (id !== null) {
      Notification.dismiss(id);
    }
  }

  private _enabled = true;
  private _levels: Map<string, AlertLevel> = new Map();
  private readonly _alertToasts = new Map<string, { id: string; level: AlertLevel }>();
  private _cullKey: string | null = null;
  private _cullToast: string | null = null;
  private _stopToast: string | null = null;
  private _stopText = '';
}

function toastType(level: AlertLevel): Notification.TypeOptions {
  return level === 'over' ? 'error' : 'warning';
}
