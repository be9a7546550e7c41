/**
 * @fracnb/meter: a GPU memory meter for JupyterLab 4 and Notebook 7.
 */
import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { PageConfig } from '@jupyterlab/coreutils';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';

import { connectionLostPlugin, speakThrough } from './connection';
import { tellDisplayZone } from './displayzone';
import { Hibernation } from './hibernation';
import {
  DEFAULT_REFRESH_MS,
  HIBERNATED_EVENT,
  HibernationStop,
  STOPPING_EVENT,
  UsageModel
} from './model';
import { BudgetNotifier } from './notify';
import { MeterPanel } from './panel';
import { MeterStatusItem } from './statusbar';
import { hubHomeUrl, serverGone } from './stopped';
import type { IHibernationReport } from './usage';
import { reportTyping } from './use';

const PLUGIN_ID = '@fracnb/meter:plugin';
const OPEN_COMMAND = 'fracnb-meter:open-panel';

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Shows GPU memory use against the budget in the status bar and a side panel.',
  autoStart: true,
  optional: [IStatusBar, ISettingRegistry, ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    statusBar: IStatusBar | null,
    settingRegistry: ISettingRegistry | null,
    palette: ICommandPalette | null
  ): void => {
    const model = new UsageModel(DEFAULT_REFRESH_MS);
    // A hibernation just before a stop, also where polls no longer reach the server (model.ts).
    app.serviceManager.events.stream.connect((_, emission) => {
      if (emission.schema_id === HIBERNATED_EVENT && emission.report) {
        const stop = typeof emission.stop === 'string' ? (emission.stop as HibernationStop) : null;
        const notice = typeof emission.notice === 'string' ? emission.notice : null;
        model.tellHibernation(emission.report as unknown as IHibernationReport, stop, notice);
      } else if (emission.schema_id === STOPPING_EVENT) {
        model.tellStopping();
      }
    });
    // Typing is use, for the hub's idle timeout (a polling page is not).
    reportTyping();
    speakThrough(model); // its stopped-server notice replaces JupyterHub's dialog (connection.ts)
    const openPath = (path: string) => void app.commands.execute('docmanager:open', { path });
    // Under JupyterHub, where a stopped server is started again.
    const hubHome = hubHomeUrl(PageConfig.getOption('hubPrefix'), PageConfig.getOption('hubHost'));
    // The kernel's times (the widget, %fracnb_restore) in the zone of this browser.
    void tellDisplayZone();
    // Saved variables: the offer to restore them when their notebook opens in a new kernel.
    const openPaths = (): string[] =>
      Array.from(app.shell.widgets('main'))
        .map(widget => (widget as { context?: { path?: unknown } }).context?.path)
        .filter((path): path is string => typeof path === 'string');
    const hibernation = new Hibernation(
      app.serviceManager.sessions,
      path => openPaths().includes(path),
      openPath
    );
    model.changed.connect((_, state) => {
      if (serverGone(state)) {
        hibernation.serverStopped();
      }
    });
    const panel = new MeterPanel(model, openPath, hubHome, hibernation);
    app.shell.add(panel, 'right', { rank: 900 });

    app.commands.addCommand(OPEN_COMMAND, {
      label: 'Show GPU Usage',
      caption: 'Open the GPU usage panel',
      execute: () => app.shell.activateById(panel.id)
    });
    palette?.addItem({ command: OPEN_COMMAND, category: 'GPU' });
    const openPanel = () => void app.commands.execute(OPEN_COMMAND);
    // The notebooks open in this tab: its stop toast says what became of their variables.
    const notifier = new BudgetNotifier(model, openPanel, hubHome, openPaths);

    const item = new MeterStatusItem(model, openPanel);
    if (statusBar) {
      statusBar.registerStatusItem(PLUGIN_ID, { item, align: 'left', rank: 100 });
    } else {
      // Notebook 7 has no status bar: show the meter in its top bar instead.
      item.addClass('fracnb-meter-topbar');
      app.shell.add(item, 'top', { rank: 1000 });
    }

    if (settingRegistry) {
      void settingRegistry.load(PLUGIN_ID).then(
        settings => {
          const apply = () => {
            model.setRefreshInterval(settings.get('refreshRate').composite as number);
            notifier.enabled = settings.get('notify').composite as boolean;
          };
          apply();
          settings.changed.connect(apply);
        },
        reason => {
          // The defaults (1 s, notifications on) stay in force.
          console.warn('@fracnb/meter: settings could not be loaded', reason);
        }
      );
    }
  }
};

export default [plugin, connectionLostPlugin];
