/**
 * One voice when the server is gone. JupyterHub's own "Server unavailable or unreachable — Restart /
 * Dismiss" dialog (@jupyterlab/hub-extension:connectionlost, which package.json disables) would sit on
 * top of fracnb's notice, which says why the server stopped and offers to start it again. This
 * plugin takes its place: where fracnb's meter runs and the hub says the server is not running, the
 * meter's notice speaks alone; anywhere else, the same dialog as JupyterHub's.
 */
import {
  ConnectionLost,
  IConnectionLost,
  JupyterFrontEnd,
  JupyterFrontEndPlugin,
  JupyterLab
} from '@jupyterlab/application';
import { Dialog, showDialog } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import type { ServerConnection, ServiceManager } from '@jupyterlab/services';

import type { UsageModel } from './model';
import { fracnbSpeaks } from './stopped';

/** JupyterHub's command that starts the server again (its hub extension registers it). */
const RESTART_COMMAND = 'hub:restart';

let meter: UsageModel | null = null;

/** The meter whose notice speaks for a stopped server (the main plugin's). */
export function speakThrough(model: UsageModel): void {
  meter = model;
}

function statusOf(error: unknown): number | null {
  const response = (error as ServerConnection.ResponseError | null)?.response;
  return typeof response?.status === 'number' ? response.status : null;
}

export const connectionLostPlugin: JupyterFrontEndPlugin<IConnectionLost> = {
  id: '@fracnb/meter:connection-lost',
  description:
    "JupyterHub's server-unavailable dialog, except where fracnb's notice says why the server stopped.",
  autoStart: true,
  optional: [JupyterLab.IInfo],
  provides: IConnectionLost,
  activate: (app: JupyterFrontEnd, info: JupyterLab.IInfo | null): IConnectionLost => {
    if (!PageConfig.getOption('hubPrefix')) {
      return ConnectionLost; // not under JupyterHub: JupyterLab's own dialog
    }
    let showing = false;
    return async (_manager: ServiceManager.IManager, error: Error): Promise<void> => {
      const state = meter?.state ?? null;
      if (fracnbSpeaks(statusOf(error), (state?.receivedAt ?? null) !== null, state)) {
        void meter?.refresh().catch(() => undefined); // the notice comes with the meter's next answer
        return;
      }
      if (showing) {
        return;
      }
      showing = true;
      if (info) {
        info.isConnected = false;
      }
      try {
        const result = await showDialog({
          title: 'Server unavailable or unreachable',
          body: `Your server at ${PageConfig.getBaseUrl()} is not running.\nWould you like to restart it?`,
          buttons: [
            Dialog.okButton({ label: 'Restart' }),
            Dialog.cancelButton({ label: 'Dismiss' })
          ]
        });
        if (result.button.accept) {
          await app.commands.execute(RESTART_COMMAND);
        }
      } finally {
        if (info) {
          info.isConnected = true;
        }
        showing = false;
      }
    };
  }
};
