/**
 * Hibernation in the front end: the saved states of this server, the offer to restore one when
 * its notebook opens in a new kernel, and restoring or discarding (docs/hibernation.md).
 *
 * The restore runs in the notebook's own kernel; this page only asks the server to start it.
 * A discard asks first: saved work cannot come back. An offer on screen goes as soon as its
 * state is restored or discarded from anywhere (this page, the widget, %fracnb_restore, another
 * tab): while one is shown, the states are read again every OFFER_CHECK_MS.
 */
import { Dialog, Notification, showDialog } from '@jupyterlab/apputils';
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
import {
  conflictQuestion,
  discardQuestion,
  namesWithin,
  offerKey,
  offerText,
  restoreHeadline,
  restoreResult,
  stateStamp,
  statesToOffer,
  withdrawnOffers,
  withinNotification
} from './offers';

/** How often the states are read again while an offer is on screen. */
export const OFFER_CHECK_MS = 3000;

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
  /**
   * ``isOpen`` and ``open``: whether a notebook is open in this page, and opening it. An offer for a
   * notebook that is not open (its kernel runs, its tab is elsewhere or closed) has an Open button.
   */
  constructor(
    private readonly sessions: Session.IManager,
    private readonly isOpen: (path: string) => boolean = () => true,
    private readonly open: (path: string) => void = () => undefined
  ) {
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

  /** Read the states again; ``always``: tell the views even when the states are the same. */
  async refresh(always = true): Promise<void> {
    let read = true;
    try {
      this._states = (await fetchStates()).states;
    } catch {
      this._states = []; // hibernation off, or the server gone: nothing to offer
      read = false;
    }
    const text = JSON.stringify(this._states);
    if (always || text !== this._statesText) {
      this._changed.emit(this._states);
    }
    this._statesText = text;
    if (read) {
      this._withdraw(); // a failed read says nothing about the offers on screen
    }
    this._offer();
    this._checkWhileOffered();
  }

  /**
   * The server stopped: its saved states are listed no longer (their Restore and Discard would reach a
   * server that is gone, and the stop may have saved newer ones; the stop notice and the hub home say
   * what was saved). The next successful read lists them again.
   */
  serverStopped(): void {
    if (this._states.length > 0) {
      this._states = [];
      this._statesText = '';
      this._changed.emit(this._states);
    }
  }

  /** Ask before deleting saved work; true when the user confirmed. */
  async confirmDiscard(state: ISavedState): Promise<boolean> {
    const result = await showDialog({
      title: 'Discard the saved variables?',
      body: discardQuestion(state),
      buttons: [
        Dialog.cancelButton({ label: 'Keep them' }),
        Dialog.warnButton({ label: 'Discard' })
      ],
      defaultButton: 0 // Enter keeps the saved work: deleting it takes a click
    });
    return result.button.accept;
  }

  async restore(
    state: ISavedState,
    kernelId: string,
    force = false,
    onConflict?: 'keep' | 'take'
  ): Promise<void> {
    let report: IRestoreReport;
    try {
      // saved_at: a state saved again since the offer is not restored in its place (409).
      const body = { key: state.key, kernel_id: kernelId, force, on_conflict: onConflict };
      report = await restoreState(state.saved_at ? { ...body, saved_at: state.saved_at } : body);
    } catch (error) {
      Notification.error(`Variables not restored: ${String((error as Error).message)}`, {
        autoClose: false
      });
      await this.refresh();
      return;
    }
    if (report.status === 'conflict') {
      Notification.warning(withinNotification(`${state.path}: ${conflictQuestion(report)}`), {
        autoClose: false,
        actions: [
          {
            label: 'Keep mine',
            caption: 'Restore the other saved variables and keep the values this kernel has',
            callback: () => void this.restore(state, kernelId, force, 'keep')
          },
          {
            label: 'Take the saved',
            caption: `Replace ${report.conflicts.join(', ')} with the saved values`,
            displayType: 'warn',
            callback: () => void this.restore(state, kernelId, force, 'take')
          }
        ]
      });
      return;
    }
    if (report.status === 'confirm') {
      const warning = `${offerText(state)}? It was saved with other versions: ${report.warnings.join(', ')}.`;
      Notification.warning(warning, {
        autoClose: false,
        actions: [
          {
            label: 'Restore anyway',
            callback: () => void this.restore(state, kernelId, true, onConflict)
          }
        ]
      });
      return;
    }
    const ok = report.status === 'restored';
    const failed = report.status === 'failed' || report.status === 'refused';
    const type = ok ? 'success' : failed ? 'error' : 'warning';
    // Lab cuts a notification at 140 characters: the line names what was not restored, Details says why.
    const headline = restoreHeadline(report);
    const full = restoreResult(report);
    const details = {
      label: 'Details',
      caption: 'What was restored, and why the others were not',
      callback: (event: Event) => {
        event.preventDefault(); // the notification stays
        void showDialog({ title: 'Restore', body: full, buttons: [Dialog.okButton()] });
      }
    };
    Notification.emit(headline, type, {
      autoClose: ok && headline === full ? 8000 : false,
      actions: headline === full ? [] : [details]
    });
    await this.refresh();
  }

  /** Discard ``state`` once the user confirmed; false when they kept it. */
  async discard(state: ISavedState): Promise<boolean> {
    if (!(await this.confirmDiscard(state))) {
      return false;
    }
    try {
      await discardState(state.key);
    } catch (error) {
      Notification.error(`The saved variables were not discarded: ${(error as Error).message}`);
    }
    await this.refresh();
    return true;
  }

  private _onSessions(): void {
    void this.refresh();
  }

  private _offer(): void {
    const sessions = Array.from(this.sessions.running());
    for (const { state, kernelId } of statesToOffer(this._states, sessions, this._offered)) {
      const key = offerKey(state, kernelId);
      this._offered.add(key);
      const skipped =
        state.skipped.length === 0
          ? ''
          : ` ${state.skipped.length} could not be saved: ${state.skipped.map(s => s.name).join(', ')}.`;
      const lost =
        state.lost.length === 0
          ? ''
          : ` Lost (damaged): ${namesWithin(
              state.lost.map(s => s.name),
              40
            )}.`;
      const offer = `${state.path}: ${offerText(state)}?${lost}${skipped}`;
      const path = state.path;
      const openIt: Notification.IAction[] =
        path === null || this.isOpen(path)
          ? []
          : [
              {
                label: 'Open',
                caption: `Open ${path}, whose kernel these variables would be restored into`,
                callback: event => {
                  event.preventDefault(); // the offer stays, beside the notebook now open
                  this.open(path);
                }
              }
            ];
      const id = Notification.info(withinNotification(offer), {
        autoClose: false,
        actions: [
          ...openIt,
          {
            label: 'Restore',
            caption: `Load ${state.variables.length} saved variables into the notebook's kernel`,
            callback: () => void this.restore(state, kernelId)
          },
          {
            label: 'Discard',
            caption: 'Delete the saved variables (asks first)',
            displayType: 'warn',
            callback: event => {
              event.preventDefault(); // the offer stays until the user confirmed
              void this.discard(state);
            }
          }
        ]
      });
      this._shown.set(key, { state: stateStamp(state), id });
    }
  }

  /** Withdraw the offers whose state was restored or discarded since (from anywhere). */
  private _withdraw(): void {
    const shown = Array.from(this._shown, ([key, { state }]): [string, string] => [key, state]);
    for (const key of withdrawnOffers(shown, this._states)) {
      const id = this._shown.get(key)?.id;
      if (id !== undefined) {
        Notification.dismiss(id); // never without an id: that would dismiss every notification
      }
      this._shown.delete(key);
    }
    // An offer the user closed is gone too: stop checking for it.
    const onScreen = new Set(Notification.manager.notifications.map(n => n.id));
    for (const [key, { id }] of this._shown) {
      if (!onScreen.has(id)) {
        this._shown.delete(key);
      }
    }
  }

  /** While an offer is on screen, read the states again so that it goes when it no longer holds. */
  private _checkWhileOffered(): void {
    if (this._shown.size === 0 || this._check !== null) {
      return;
    }
    this._check = setTimeout(() => {
      this._check = null;
      void this.refresh(false); // the panel is redrawn only when something changed
    }, OFFER_CHECK_MS);
  }

  private _states: ISavedState[] = [];
  private _statesText = '';
  private readonly _offered = new Set<string>();
  private readonly _shown = new Map<string, { state: string; id: string }>(); // by offer key
  private _check: ReturnType<typeof setTimeout> | null = null;
  private readonly _changed = new Signal<this, ISavedState[]>(this);
}
