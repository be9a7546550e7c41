/**
 * What to tell the user when the server stops answering: why it stopped (idle, idle while
 * someone waited for a GPU, maximum age, or unknown), what was kept and what was lost, and where to start it again. Pure.
 */
import type { IUsageState } from './model';
import { formatDuration } from './format';
import { heldNothing, savedAny, stopHibernationLines, unsavedOpenLine } from './hibernationnotice';
import type { IUsage } from './usage';

/**
 * JupyterHub answers 424 (Failed Dependency) for a request to a user's server that is not
 * running, e.g. after the idle culler stopped it.
 */
export const SERVER_NOT_RUNNING = 424;

export type StopCause =
  | 'idle'
  | 'demand'
  | 'max-age'
  | 'gpu-unused'
  | 'gpu-unused-busy'
  | 'user'
  | 'hub-shutdown'
  | 'kueue'
  | 'stopping'
  | 'unknown';

export interface IStopNotice {
  cause: StopCause;
  /** One line for the status bar's tooltip and the toast. */
  headline: string;
  /** What was kept and what was lost. */
  consequences: string;
  /** Headline and consequences, short enough for a toast (140 characters). */
  toast: string;
  /**
   * What the hibernation just before the stop saved, a line per notebook
   * (hibernationnotice.ts); empty when the server was stopped without one.
   */
  saved: string[];
}

/**
 * Saved files live on the home volume; kernels and their memory die with the server. The hub's pages
 * say the same (test-data/stop-notices.json).
 */
export const CONSEQUENCES =
  'Your saved files are kept. Running kernels were shut down: their variables and ' +
  'anything not saved are lost.';

/**
 * The same when the hibernation before the stop found no kernel holding variables: nothing was
 * lost, so the notice does not say that variables were (test-data/stop-notices.json).
 */
export const NOTHING_HELD_CONSEQUENCES =
  'Your saved files are kept. No kernel held variables, so there were none to save.';

/**
 * The same when this page knows neither why the server stopped nor whether a hibernation came
 * before: a stop its user or an admin asked for ("Stop My Server"; JupyterHub takes the server off
 * its proxy before the hub saves its variables, so the page reads nothing more from it), or any
 * stop while the tab was hidden and did not poll. The hub home knows, and says.
 */
export const UNKNOWN_CONSEQUENCES =
  'Your saved files are kept. Your variables may have been saved before the stop: the hub ' +
  'home says whether they were. Anything else not saved is lost.';

/**
 * The same when the hibernation before the stop saved variables (listed after it); the hub's pages
 * say the same (test-data/stop-notices.json).
 */
export const SAVED_CONSEQUENCES =
  'Your saved files are kept, and the variables listed here: open the notebook again to ' +
  'restore them. Anything else not saved is lost.';

/**
 * Why, after "was stopped": "for being idle for 15 min", "at its maximum age of 8 h"; "" when not
 * known. The hub's pages use the same phrases (test-data/stop-notices.json).
 */
export function stopPhrase(cause: StopCause, limitSeconds: number): string {
  switch (cause) {
    case 'idle':
      return limitSeconds > 0
        ? `for being idle for ${formatDuration(limitSeconds)}`
        : 'for being idle';
    case 'demand':
      return 'for being idle while someone waited for a GPU';
    case 'gpu-unused':
      return 'for not using its GPU while idle';
    case 'gpu-unused-busy':
      return 'for not using its GPU for too long';
    case 'max-age':
      return limitSeconds > 0
        ? `at its maximum age of ${formatDuration(limitSeconds)}`
        : 'at its maximum age';
    case 'user':
      return 'on request by you or an admin';
    case 'hub-shutdown':
      return 'as JupyterHub shut down';
    default:
      return '';
  }
}

/**
 * Slack between the announced deadline and the moment the page noticed the stop: the
 * poll interval, and the clocks of the hub and this browser.
 */
export const DEADLINE_SLACK_S = 30;

/**
 * Why the server stopped, judged from the last sample before it did: a shutdown the hub
 * had scheduled and that was due when the server stopped answering is the one that
 * happened, whether or not its warning was on screen yet (a page in a background tab stops
 * polling long before the warning). ``secondsUntilStop`` is the time from that sample to
 * the first failed request; a stop well before the deadline (the user's own "Stop My
 * Server", say) has no known cause, unless the hub said why when it asked for the hibernation
 * before the stop (``hibernation_stop``: "user" for a stop on request).
 */
export function stopCause(last: IUsage | null, secondsUntilStop: number): StopCause {
  // The hub said why when it asked for the hibernation before the stop.
  const told = last?.hibernation ? (last.hibernation_stop ?? null) : null;
  if (told !== null) {
    return told;
  }
  const deadline = last?.cull?.deadline ?? null;
  if (deadline === null) {
    return 'unknown';
  }
  return secondsUntilStop + DEADLINE_SLACK_S >= deadline.seconds_left ? deadline.reason : 'unknown';
}

/**
 * The notice while the server saves at a stop it announced (model.ts STOPPING_EVENT), before the
 * stop's own notice comes.
 */
export const STOPPING_HEADLINE =
  'This server is stopping: its idle notebooks are saving their variables.';
export const STOPPING_CONSEQUENCES =
  'Your saved files are kept. Why it stopped and what was saved follow here in a moment; the hub ' +
  'home says them too.';

/**
 * Whether the server is gone (or going), so that fracnb's notice speaks: the hub answers that it
 * is not running, or it said that it is stopping (Kueue deleted its pod: until the hub's next poll,
 * the proxy still routes to it and answers 503).
 */
export function serverGone(state: IUsageState): boolean {
  if (state.error === null) {
    return false;
  }
  return state.errorStatus === SERVER_NOT_RUNNING || told(state);
}

/** The server said it is stopping, or sent the notice of a stop Kueue made. */
function told(state: IUsageState): boolean {
  return (state.stoppingSince ?? null) !== null || state.usage?.hibernation_stop === 'kueue';
}

/** The notice for a poller state whose requests fail because the server is not running. */
export function stopNoticeOf(state: IUsageState, openPaths: string[] = []): IStopNotice {
  if (
    (state.stoppingSince ?? null) !== null &&
    state.usage?.hibernation_stop !== 'kueue' &&
    state.errorStatus !== SERVER_NOT_RUNNING
  ) {
    const toast = `${STOPPING_HEADLINE} Saved files are kept.`;
    return {
      cause: 'stopping',
      headline: STOPPING_HEADLINE,
      consequences: STOPPING_CONSEQUENCES,
      toast,
      saved: []
    };
  }
  const { receivedAt, failingSince } = state;
  const elapsed =
    receivedAt === null || failingSince === null ? 0 : (failingSince - receivedAt) / 1000;
  return stopNotice(state.usage, elapsed, openPaths);
}

/** ``openPaths``: the notebooks open in this tab, whose own outcome its toast tells. */
export function stopNotice(
  last: IUsage | null,
  secondsUntilStop: number,
  openPaths: string[] = []
): IStopNotice {
  const cause = stopCause(last, secondsUntilStop);
  const cull = last?.cull ?? null;
  const limit = cause === 'max-age' ? cull?.max_age_seconds : cull?.idle_timeout_seconds;
  const phrase = stopPhrase(cause, limit ?? 0);
  const saved = stopHibernationLines(last);
  const notice = cause === 'kueue' ? (last?.stop_notice ?? null) : null;
  if (notice !== null) {
    // The hub's own words for the stop (its fracnb service's notice, as the hub home says it),
    // which say why, what was saved, and that starting again waits in Kueue's queue.
    // The toast is cut at 140 characters: its first sentence, why and what was saved.
    return { cause, headline: notice, consequences: '', toast: firstSentence(notice), saved };
  }
  const headline = phrase ? `This server was stopped ${phrase}.` : 'This server was stopped.';
  if (savedAny(last)) {
    return {
      cause,
      headline,
      consequences: `${SAVED_CONSEQUENCES} ${saved.join(' ')}`,
      // This tab's notebook may be the one that was running a cell: its toast says so.
      toast: `${headline} ${
        unsavedOpenLine(last, openPaths) ??
        'Your variables were saved: open the notebook again to restore them.'
      }`,
      saved
    };
  }
  if (heldNothing(last)) {
    return {
      cause,
      headline,
      consequences: NOTHING_HELD_CONSEQUENCES,
      toast: `${headline} Saved files are kept; no kernel held variables.`,
      saved: []
    };
  }
  if (cause === 'unknown' && (last?.hibernation ?? null) === null) {
    return {
      cause,
      headline,
      consequences: UNKNOWN_CONSEQUENCES,
      toast: `${headline} Saved files are kept; the hub home says whether your variables were saved.`,
      saved
    };
  }
  return {
    cause,
    headline,
    consequences: CONSEQUENCES,
    toast: `${headline} Saved files are kept; running kernels and unsaved changes are lost.`,
    saved
  };
}

/** "Why. What else." -> "Why." */
function firstSentence(text: string): string {
  const end = text.indexOf('. ');
  return end < 0 ? text : text.slice(0, end + 1);
}

/**
 * The hub's home page, where the user starts the server again, or null outside JupyterHub.
 * ``hubPrefix`` and ``hubHost`` are the page options JupyterHub's single-user server sets.
 */
export function hubHomeUrl(hubPrefix: string, hubHost: string): string | null {
  if (hubPrefix === '') {
    return null;
  }
  const prefix = hubPrefix.endsWith('/') ? hubPrefix : `${hubPrefix}/`;
  return `${hubHost}${prefix}home`;
}

/**
 * Whether fracnb's notice covers a failed request of JupyterLab's (connection.ts): the meter has read
 * this server before (so it runs here and shows its stopped-server notice), and the hub answered that
 * the server is not running, or the server said it is stopping (``state``, the meter's: :func:`serverGone`),
 * whatever the proxy answers meanwhile. Elsewhere JupyterHub's own dialog asks whether to restart.
 */
export function fracnbSpeaks(
  status: number | null,
  meterHasRead: boolean,
  state: IUsageState | null = null
): boolean {
  return meterHasRead && (status === SERVER_NOT_RUNNING || (state !== null && told(state)));
}

/** The request failure as the user may read it: no class names, no raw status lines. */
export function failureText(status: number | null): string {
  if (status === null) {
    return 'GPU usage cannot be read: the server does not answer. It may be restarting or stopped.';
  }
  return `GPU usage cannot be read right now (the server answered with HTTP status ${status}).`;
}
