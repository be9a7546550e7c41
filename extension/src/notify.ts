/**
 * JupyterLab notifications: a kernel or the server passing 95 % of the GPU memory
 * budget (once per crossing), and the culling warning (once per shutdown time).
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
      this._cullNotified = null;
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
    if (message !== null && deadline !== null && deadline.cull_at !== this._cullNotified) {
      this._cullNotified = deadline.cull_at;
      Notification.warning(message, { autoClose: false });
    }
  }

  private _enabled = true;
  private _alerted: Set<string> = new Set();
  private _cullNotified: string | null = null;
}
