/**
 * The status bar item: "GPU 3.1 / 20 GiB", coloured by the share of the budget in use.
 */
import { Widget } from '@lumino/widgets';

import { UsageModel } from './model';
import { Level, summarizeState } from './summary';

const LEVEL_CLASSES: Record<Level, string> = {
  normal: 'fracnb-meter-normal',
  warning: 'fracnb-meter-warning',
  critical: 'fracnb-meter-critical',
  over: 'fracnb-meter-over',
  unavailable: 'fracnb-meter-unavailable'
};

export class MeterStatusItem extends Widget {
  constructor(
    private readonly model: UsageModel,
    private readonly onOpen: () => void
  ) {
    super();
    this.addClass('fracnb-meter-status');
    this.node.setAttribute('role', 'button');
    this.node.tabIndex = 0;
    this.node.addEventListener('click', this.onOpen);
    this.node.addEventListener('keydown', event => {
      if (event.key === 'Enter' || event.key === ' ') {
        this.onOpen();
      }
    });
    this._text = document.createElement('span');
    this._text.className = 'fracnb-meter-status-text';
    this.node.appendChild(this._text);
    model.changed.connect(this._render, this);
    this._render();
  }

  dispose(): void {
    this.model.changed.disconnect(this._render, this);
    super.dispose();
  }

  private _render(): void {
    const summary = summarizeState(this.model.state);
    this._text.textContent = summary.text;
    this.node.title = `${summary.title}\nClick for details per notebook.`;
    this.node.dataset.level = summary.level;
    for (const [level, cls] of Object.entries(LEVEL_CLASSES)) {
      this.node.classList.toggle(cls, level === summary.level);
    }
  }

  private readonly _text: HTMLSpanElement;
}
