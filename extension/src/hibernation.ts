/**
 * Hibernation in the front end: the saved states of this server, the offer to restore one when
 * its notebook opens in a new kernel, and restoring or discarding (docs/hibernation.md).
 *
 * The restore runs in the notebook's own kernel; this page only asks the server to start it.
 */
import { Notification } from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection, Session } from '@jupyterlab/services';
import { ISignal, Signal } from '@lumino/signaling';

import type {
  IHibernationStates,
  IRestoreReport,
  IRestoreRequest,
  ISavedState
} from './hibernation-api';

export { offerText } from './offers';
import { offerText, restoreResult, statesToOffer } from './offers';

export const STATES_PATH = 'fracnb/api/hibernation/states';
export const RESTORE_PATH = 'fracnb/api/hibernation/restore';

/** Raised when the server answers a hibernation request with an error; the message says why. */
export class HibernationRequestError extends Error {
  constructor(
    message: string,
    readonly status: number | null
  ) {
    super(message);
    this.name = 'HibernationRequestError';
  }
}

async function request(
  path: string,
  init: RequestInit,
  settings: ServerConnection.ISettings
): Promise<Response> {
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(
      URLExt.join(settings.baseUrl, path),
      init,
      settings
    );
  } catch (error) {
    throw new HibernationRequestError(`cannot reach the server: ${String(error)}`, null);
  }
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const body = (await response.json()) as { message?: string };
      message = body.message ?? message;
    } catch {
      // not JSON: the status line says enough
    }
    throw new HibernationRequestError(message, response.status);
  }
  return response;
}

export async function fetchStates(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IHibernationStates> {
  const response = await request(STATES_PATH, { method: 'GET' }, settings);
  return (await response.json()) as IHibernationStates;
}

export async function restoreState(
  body: IRestoreRequest,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IRestoreReport> {
  const init = { method: 'POST', body: JSON.stringify(body) };
  const response = await request(RESTORE_PATH, init, settings);
  return (await response.json()) as IRestoreReport;
}

export async function discardState(
  key: string,
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<void> {
  await request(URLExt.join(STATES_PATH, key), { method: 'DELETE' }, settings);
}

/**
 * The saved states, refreshed when sessions change and after a restore or discard, and the
 * offers: one notification per saved state and new kernel of its notebook.
 */
export class Hibernation {
  constructor(private readonly sessions: Session.IManager) {
    sessions.runningChanged.connect(this._onSessions, this);
    void this.refresh();
  }

  get changed(): ISignal<this, ISavedState[]> {
    return this._changed;
  }

  get states(): ISavedState[] {
    return this._states;
  }

  /** The kernel of a running session for ``path``, or null. */
  kernelFor(path: string | null): string | null {
    for (const session of this.sessions.running()) {
      if (session.path === path && session.kernel) {
        return session.kernel.id;
      }
    }
    return null;
  }

  async refresh(): Promise<void> {
    try {
      this._states = (await fetchStates()).states;
    } catch {
      this._states = []; // hibernation off, or the server gone: nothing to offer
    }
    this._changed.emit(this._states);
    this._offer();
  }

  async restore(state: ISavedState, kernelId: string, force = false): Promise<void> {
    let report: IRestoreReport;
    try {
      report = await restoreState({ key: state.key, kernel_id: kernelId, force });
    } catch (error) {
      Notification.error(`Variables not restored: ${String((error as Error).message)}`, {
        autoClose: false
      });
      return;
    }
    if (report.status === 'confirm') {
      const warning = `${offerText(state)}? It was saved with other versions: ${report.warnings.join(', ')}.`;
      Notification.warning(warning, {
        autoClose: false,
        actions: [
          { label: 'Restore anyway', callback: () => void this.restore(state, kernelId, true) }
        ]
      });
      return;
    }
    const ok = report.status === 'restored';
    const failed = report.status === 'failed' || report.status === 'refused';
    const type = ok ? 'success' : failed ? 'error' : 'warning';
    Notification.emit(restoreResult(report), type, { autoClose: ok ? 8000 : false });
    await this.refresh();
  }

  async discard(state: ISavedState): Promise<void> {
    try {
      await discardState(state.key);
    } catch (error) {
      Notification.error(`The saved variables were not discarded: ${(error as Error).message}`);
    }
    await this.refresh();
  }

  private _onSessions(): void {
    void this.refresh();
  }

  private _offer(): void {
    for (const { state, kernelId } of statesToOffer(
      this._states,
      Array.from(this.sessions.running()),
      this._offered
    )) {
      this._offered.add(`${state.key} ${kernelId}`);
      const skipped =
        state.skipped.length === 0
          ? ''
          : ` ${state.skipped.length} could not be saved: ${state.skipped.map(s => s.name).join(', ')}.`;
      Notification.info(`${state.path}: ${offerText(state)}?${skipped}`, {
        autoClose: false,
        actions: [
          {
            label: 'Restore',
            caption: `Load ${state.variables.length} saved variables into the notebook's kernel`,
            callback: () => void this.restore(state, kernelId)
          },
          {
            label: 'Discard',
            caption: 'Delete the saved variables',
            displayType: 'warn',
            callback: () => void this.discard(state)
          }
        ]
      });
    }
  }

  private _states: ISavedState[] = [];
  private readonly _offered = new Set<string>();
  private readonly _changed = new Signal<this, ISavedState[]>(this);
}
