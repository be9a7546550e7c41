import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  CONSEQUENCES,
  NOTHING_HELD_CONSEQUENCES,
  SAVED_CONSEQUENCES,
  STOPPING_HEADLINE,
  UNKNOWN_CONSEQUENCES,
  failureText,
  fracnbSpeaks,
  hubHomeUrl,
  serverGone,
  stopCause,
  stopNotice,
  stopNoticeOf,
  stopPhrase,
  type StopCause
} from '../stopped';
import type { IUsageState } from '../model';
import type { IKernelOutcome, IUsage } from '../usage';
import { cull, deadline, testData, usage } from './fixtures';

describe('why the server stopped', () => {
  test('an idle shutdown the hub had announced', () => {
    const last = usage({ cull: cull() });
    // The warning said 240 s; the server stopped answering 235 s after that sample.
    assert.equal(stopCause(last, 235), 'idle');
    const notice = stopNotice(last, 235);
    assert.equal(notice.headline, 'This server was stopped for being idle for 30 min.');
    assert.match(notice.consequences, /saved files are kept/);
    assert.match(notice.consequences, /Running kernels were shut down/);
    assert.match(
      notice.toast,
      /^This server was stopped for being idle for 30 min\. Saved files are kept;/
    );
  });

  test('an idle shutdown while someone waited for a GPU says so', () => {
    const last = usage({ cull: cull({ deadline: deadline({ reason: 'demand' }) }) });
    assert.equal(stopCause(last, 235), 'demand');
    const notice = stopNotice(last, 235);
    assert.equal(
      notice.headline,
      'This server was stopped for being idle while someone waited for a GPU.'
    );
    assert.ok(notice.toast.length <= 140, notice.toast);
  });

  test('every toast fits, whatever the durations', () => {
    const last = usage({
      cull: cull({ idle_timeout_seconds: 86399, max_age_seconds: 86399 * 7 })
    });
    assert.ok(stopNotice(last, 240).toast.length <= 140, stopNotice(last, 240).toast);
    const maxAge = usage({
      cull: cull({ max_age_seconds: 86399 * 7, deadline: deadline({ reason: 'max-age' }) })
    });
    assert.ok(stopNotice(maxAge, 240).toast.length <= 140, stopNotice(maxAge, 240).toast);
  });

  test('a maximum-age shutdown reads its age readably', () => {
    const last = usage({
      cull: cull({ max_age_seconds: 28800, deadline: deadline({ reason: 'max-age' }) })
    });
    assert.equal(
      stopNotice(last, 240).headline,
      'This server was stopped at its maximum age of 8 h.'
    );
  });

  test('without a scheduled shutdown, no cause is made up', () => {
    assert.equal(stopCause(null, 0), 'unknown');
    assert.equal(stopCause(usage({ cull: cull({ deadline: null }) }), 3600), 'unknown');
    assert.equal(stopNotice(usage(), 0).headline, 'This server was stopped.');
    // A stop on request, or while the tab was hidden: the hub may have saved first, so no claim of loss.
    const unknown = stopNotice(usage(), 0);
    assert.equal(unknown.consequences, UNKNOWN_CONSEQUENCES);
    assert.doesNotMatch(unknown.toast, /lost/);
    assert.ok(unknown.toast.length <= 140, unknown.toast);
  });

  test('a page left in a background tab still learns it was an idle shutdown', () => {
    // The last sample came 20 minutes before the deadline, long before any warning; the page
    // noticed the stop when the tab came back, an hour later.
    const quiet = usage({
      cull: cull({ deadline: deadline({ warning: false, seconds_left: 1200 }) })
    });
    assert.equal(stopCause(quiet, 3600), 'idle');
    // The same sample, but the server stopped answering ten minutes later: not the culler.
    assert.equal(stopCause(quiet, 600), 'unknown');
  });

  test('a stop long before the announced deadline is not blamed on idleness', () => {
    // Warned of a stop in 4 minutes, the user pressed "Stop My Server" a minute later.
    assert.equal(stopCause(usage({ cull: cull() }), 60), 'unknown');
  });

  test('judged once, from when requests began failing', () => {
    const state = {
      usage: usage({ cull: cull() }),
      error: 'UsageRequestError: the usage API answered 424 Failed Dependency',
      errorStatus: 424,
      receivedAt: 1_000_000,
      failingSince: 1_000_000 + 230_000
    };
    assert.equal(stopNoticeOf(state).cause, 'idle');
    assert.equal(stopNoticeOf({ ...state, failingSince: 1_000_000 + 5_000 }).cause, 'unknown');
  });
});

describe('hub home', () => {
  test('from the page options JupyterHub sets', () => {
    assert.equal(hubHomeUrl('/hub/', ''), '/hub/home');
    assert.equal(
      hubHomeUrl('/jupyter/hub', 'https://hub.example.org'),
      'https://hub.example.org/jupyter/hub/home'
    );
    assert.equal(hubHomeUrl('', ''), null);
  });
});

describe('request failures', () => {
  test('no class names or raw status lines', () => {
    for (const text of [failureText(null), failureText(502)]) {
      assert.doesNotMatch(text, /Error:|UsageRequestError|Bad Gateway/);
    }
    assert.match(failureText(502), /HTTP status 502/);
  });
});

describe('the same words as the hub (test-data/stop-notices.json)', () => {
  const notices = testData<{
    consequences: string;
    saved_consequences: string;
    nothing_held_consequences: string;
    cases: Array<{ reason: StopCause; limit_seconds: number; phrase: string }>;
  }>('stop-notices.json');

  test('what is kept and lost', () => {
    assert.equal(CONSEQUENCES, notices.consequences);
    assert.equal(SAVED_CONSEQUENCES, notices.saved_consequences);
    assert.equal(NOTHING_HELD_CONSEQUENCES, notices.nothing_held_consequences);
  });

  for (const { reason, limit_seconds, phrase } of notices.cases) {
    test(`${reason} after ${limit_seconds} s: "${phrase}"`, () => {
      assert.equal(stopPhrase(reason, limit_seconds), phrase);
    });
  }
});

describe("JupyterHub's dialog or fracnb's notice", () => {
  test('the notice speaks alone where the meter runs and the hub says the server is not running', () => {
    assert.equal(fracnbSpeaks(424, true), true);
  });
  test("JupyterHub's dialog anywhere else", () => {
    assert.equal(fracnbSpeaks(424, false), false); // no fracnb meter on this server
    assert.equal(fracnbSpeaks(502, true), false);
    assert.equal(fracnbSpeaks(null, true), false); // no answer at all
    assert.equal(fracnbSpeaks(503, true, failing(usage(), 503)), false);
  });
  test('the notice speaks alone for a server that said it is stopping, whatever the proxy answers', () => {
    // Kueue deleted the pod: until the hub's next poll the proxy still routes to it (503), or nothing answers.
    const stopping = { ...failing(usage(), 503), stoppingSince: 2_000 };
    assert.equal(fracnbSpeaks(503, true, stopping), true);
    assert.equal(fracnbSpeaks(null, true, stopping), true);
    assert.equal(serverGone(stopping), true);
    const preempted = failing(kueueStop(), null);
    assert.equal(fracnbSpeaks(null, true, preempted), true);
    assert.equal(serverGone(preempted), true);
    assert.equal(serverGone(failing(usage(), 503)), false); // a server that did not say: its failure
  });
});

const KUEUE_NOTICE =
  'Your server stopped at 14:05 UTC, preempted by team-b taking back its own quota; 3 variables of ' +
  "train.ipynb saved. Files in your home are kept; starting it again waits in Kueue's queue for a GPU.";

function kueueStop(): IUsage {
  const kernels: IKernelOutcome[] = [
    {
      kernel_id: 'k1',
      path: 'train.ipynb',
      status: 'saved',
      reason: null,
      bytes: 30,
      variables: 3,
      skipped: [],
      saved_at: '2026-03-01T14:05:02+00:00',
      seconds: 0.2
    }
  ];
  const totals = { saved: 1, partly_saved: 0, failed: 0, skipped_over_limit: 0, busy: 0 };
  const hibernation = {
    started_at: '2026-03-01T14:05:00+00:00',
    seconds: 2,
    timeout_seconds: 120,
    limit_bytes: 1024,
    saved_bytes: 30,
    totals: { ...totals, empty: 0, not_supported: 0 },
    kernels
  };
  return usage({ hibernation, hibernation_stop: 'kueue', stop_notice: KUEUE_NOTICE });
}

function failing(last: IUsage, status: number | null): IUsageState {
  return {
    usage: last,
    error: 'failed',
    errorStatus: status,
    receivedAt: 1_000,
    failingSince: 3_000
  };
}

describe('a stop Kueue made', () => {
  test("the tab says the hub's notice: why, naming what was saved, and that starting again queues", () => {
    const notice = stopNoticeOf(failing(kueueStop(), 503));
    assert.equal(notice.cause, 'kueue');
    assert.equal(notice.headline, KUEUE_NOTICE);
    assert.equal(notice.toast, KUEUE_NOTICE.slice(0, KUEUE_NOTICE.indexOf(' Files in')));
    assert.match(notice.saved.join(' '), /train\.ipynb/);
    // Still so once the hub has seen the stop (424).
    assert.equal(stopNoticeOf(failing(kueueStop(), 424)).headline, KUEUE_NOTICE);
  });
  test('while the server saves, the tab says it is stopping, not that it is lost', () => {
    const notice = stopNoticeOf({ ...failing(usage(), 503), stoppingSince: 2_000 });
    assert.equal(notice.cause, 'stopping');
    assert.equal(notice.headline, STOPPING_HEADLINE);
  });
});
