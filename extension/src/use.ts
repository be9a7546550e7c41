/**
 * Typing is use: the server's idle timeout counts from the last cell run, save, kernel
 * computation or keystroke, not from a page polling it (fracnb_meter.use). Typing sends nothing
 * to the server by itself, so the page tells it: ``POST fracnb/api/use``, at most every
 * TYPING_REPORT_MS while the user types anywhere in the page.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** The path of the use endpoint below the server's base URL. */
export const USE_PATH = 'fracnb/api/use';
/** Well within the service's activity report lag (45 s) with the meter's 30 s reports. */
export const TYPING_REPORT_MS = 10_000;

/** Calls ``report`` on the first key press and then at most every ``intervalMs``. Pure timing. */
export class TypingReporter {
  constructor(
    private readonly report: () => void,
    private readonly intervalMs: number = TYPING_REPORT_MS,
    private readonly clock: () => number = Date.now
  ) {}

  keyPressed(): void {
    const now = this.clock();
    if (this._last !== null && now - this._last < this.intervalMs) {
      return;
    }
    this._last = now;
    this.report();
  }

  private _last: number | null = null;
}

/** Tell the server of typing in this page; the function returned stops it. */
export function reportTyping(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): () => void {
  const url = URLExt.join(settings.baseUrl, USE_PATH);
  const reporter = new TypingReporter(() => {
    // Best effort: a server that does not answer is stopped or restarting, and says so elsewhere.
    ServerConnection.makeRequest(url, { method: 'POST' }, settings).catch(() => undefined);
  });
  const listener = () => reporter.keyPressed();
  document.addEventListener('keydown', listener, true);
  return () => document.removeEventListener('keydown', listener, true);
}
