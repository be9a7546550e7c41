/**
 * JupyterLab notifications: a kernel or the server passing 95 % of the GPU memory
 * budget (once per crossing), and the culling warning (once per deadline, withdrawn when it
 * no longer holds).
 */
import { Notification } from '@jupyterlab/apputils';

import { IUsageState, UsageModel } from './model';
import { crossingMessage, cullMessage, newCrossings } from './summary';

export class BudgetNotifier {
  constructor(
    private readonly model: UsageModel,
    private readonly openPanel: () => void
  ) {
    model.changed.connect(this._onChanged, this);
  }

  /** Turning notifications off also forgets past crossings, so turning them on re-alerts. */
  set enabled(value: boolean) {
    this._enabled = value;
    if (!value) {
      this._alerted = new Set();
      this._cullKey = null;
      this._dismissCullToast();
    }
  }

  dispose(): void {
    this.model.changed.disconnect(this._onChanged, this);
  }

  private _onChanged(_: UsageModel, state: IUsageState): void {
    if (!this._enabled || state.usage === null || state.error !== null) {
      return;
    }
    const { crossed, alerted } = newCrossings(state.usage, this._alerted);
    this._alerted = alerted;
    for (const user of crossed) {
      Notification.warning(crossingMessage(user), {
        autoClose: false,
        actions: [{ label: 'Show GPU usage', callback: this.openPanel }]
      });
    }
    const deadline = state.usage.cull?.deadline ?? null;
    const message = cullMessage(state.usage);
    // A new time or a new reason is a new deadline.
    const key =
      message === null || deadline === null ? null : `${deadline.reason} ${deadline.cull_at}`;
    this._warnOfCulling(key, message);
  }

  /**
   * One toast per deadline in warning. It goes when the deadline moves (the user was
   * active) or the warning ends: it would announce a shutdown that is no longer due.
   */
  private _warnOfCulling(key: string | null, message: string | null): void {
    if (key === this._cullKey) {
      return;
    }
    this._dismissCullToast();
    this._cullKey = key;
    if (message !== null) {
      this._cullToast = Notification.warning(message, { autoClose: false });
    }
  }

  private _dismissCullToast(): void {
    if (this._cullToast !== null) {
      Notification.dismiss(this._cullToast);
      this._cullToast = null;
    }
  }

  private _enabled = true;
  private _alerted: Set<string> = new Set();
  private _cullKey: string | null = null;
  private _cullToast: string | null = null;
}
