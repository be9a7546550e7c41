import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { failureText, hubHomeUrl, stopCause, stopNotice } from '../stopped';
import { cull, deadline, usage } from './fixtures';

describe('why the server stopped', () => {
  test('an idle shutdown the hub had announced', () => {
    const last = usage({ cull: cull() });
    assert.equal(stopCause(last), 'idle');
    const notice = stopNotice(last);
    assert.equal(notice.headline, 'This server was stopped for being idle for 30 min.');
    assert.match(notice.consequences, /saved files are kept/);
    assert.match(notice.consequences, /Running kernels were shut down/);
    assert.match(
      notice.toast,
      /^This server was stopped for being idle for 30 min\. Saved files are kept;/
    );
  });

  test('every toast fits, whatever the durations', () => {
    const last = usage({
      cull: cull({ idle_timeout_seconds: 86399, max_age_seconds: 86399 * 7 })
    });
    assert.ok(stopNotice(last).toast.length <= 140, stopNotice(last).toast);
    const maxAge = usage({
      cull: cull({ max_age_seconds: 86399 * 7, deadline: deadline({ reason: 'max-age' }) })
    });
    assert.ok(stopNotice(maxAge).toast.length <= 140, stopNotice(maxAge).toast);
  });

  test('a maximum-age shutdown reads its age readably', () => {
    const last = usage({
      cull: cull({ max_age_seconds: 28800, deadline: deadline({ reason: 'max-age' }) })
    });
    assert.equal(stopNotice(last).headline, 'This server was stopped at its maximum age of 8 h.');
  });

  test('without an announced shutdown, no cause is made up', () => {
    assert.equal(stopCause(null), 'unknown');
    assert.equal(
      stopCause(usage({ cull: cull({ deadline: deadline({ warning: false }) }) })),
      'unknown'
    );
    assert.equal(stopNotice(usage()).headline, 'This server was stopped.');
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
