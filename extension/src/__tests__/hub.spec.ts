/**
 * The quota and culling states the hub's fracnb service reports, as the panel and the
 * notifications put them: never "null", "NaN", "undefined" or a made-up deadline.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { formatDuration, formatMinutes } from '../format';
import { cullRows, quotaRows } from '../summary';
import type { IGPUAmount } from '../usage';
import { cullMessage } from '../wording';
import { cull, deadline, QUOTA, usage } from './fixtures';

const QUARTER: IGPUAmount = { gpus: 0.25, exact: '1/4' };

function assertReadable(text: string): void {
  assert.doesNotMatch(text, /null|NaN|undefined|Infinity/, text);
}

describe('quota', () => {
  test('rows for the user and each group with a quota', () => {
    assert.deepEqual(quotaRows(QUOTA), [
      ['You', '0.75 of 2 GPUs'],
      ['team-a', '5.75 of 6 GPUs']
    ]);
    const unlimited = quotaRows({
      user: { used: QUARTER, limit: { state: 'unlimited' } },
      groups: []
    });
    assert.deepEqual(unlimited, [['You', '0.25 GPU, unlimited']]);
    unlimited.flat().forEach(assertReadable);
  });
});

describe('durations', () => {
  test('minutes and hours', () => {
    assert.equal(formatMinutes(45), '45 min');
    assert.equal(formatMinutes(120), '2 h');
    assert.equal(formatMinutes(90), '1 h 30 min');
    assert.equal(formatDuration(1800), '30 min');
    assert.equal(formatDuration(28800), '8 h');
    assert.equal(formatDuration(30), '30 s');
  });
});

describe('culling status', () => {
  test('never culled: no deadline is made up', () => {
    const rows = cullRows(cull({ idle_timeout_seconds: 0, max_age_seconds: 0, deadline: null }));
    assert.deepEqual(rows, [
      ['When idle', 'never stopped'],
      ['Maximum age', 'none'],
      ['Next stop', 'none scheduled']
    ]);
    assert.equal(cullMessage(usage({ cull: cull({ deadline: null }) })), null);
  });

  test('an idle deadline can be avoided by using the server', () => {
    const rows = cullRows(cull({ deadline: deadline({ warning: false, seconds_left: 1200 }) }));
    assert.deepEqual(rows, [
      ['When idle', 'stops after 30 min without activity'],
      ['Maximum age', 'none'],
      ['Stops in', '20 min unless used']
    ]);
  });

  test('a deadline under demand says someone waits and can be avoided by using the server', () => {
    const rows = cullRows(cull({ deadline: deadline({ reason: 'demand', seconds_left: 600 }) }));
    assert.deepEqual(rows[2], ['Stops in', '10 min unless used: someone is waiting for a GPU']);
  });

  test('a max-age deadline is not avoided by using the server', () => {
    const maxAge = cull({
      idle_timeout_seconds: 0,
      max_age_seconds: 28800,
      deadline: deadline({ reason: 'max-age', seconds_left: 240 })
    });
    const rows = cullRows(maxAge);
    assert.deepEqual(rows[1], ['Maximum age', '8 h after start']);
    assert.deepEqual(rows[2], ['Stops in', '4 min at its maximum age, even if used']);
    const message = cullMessage(usage({ cull: maxAge }));
    assert.equal(
      message,
      'This server reaches its maximum age and will be stopped in 4 minutes, even if in use. Save your work.'
    );
    assert.doesNotMatch(message ?? '', /unless/);
  });

  test('the idle warning', () => {
    assert.equal(
      cullMessage(usage({ cull: cull() })),
      'Idle: this server will be stopped in 4 minutes unless you use it.'
    );
    assert.equal(
      cullMessage(usage({ cull: cull({ deadline: deadline({ seconds_left: 30 }) }) })),
      'Idle: this server will be stopped in 1 minute unless you use it.'
    );
  });

  test('the idle warning says the variables will be saved where the stop saves them, and only there', () => {
    const saving = cull({ deadline: deadline({ saves_variables: true }) });
    assert.equal(
      cullMessage(usage({ cull: saving })),
      'Idle: this server will be stopped in 4 minutes unless you use it. ' +
        'Its variables will be saved for your next start.'
    );
    assert.deepEqual(cullRows(saving)[3], [
      'At that stop',
      "its idle kernels' variables are saved for your next start"
    ]);
    assert.doesNotMatch(cullMessage(usage({ cull: cull() })) ?? '', /saved/);
    assert.equal(cullRows(cull()).length, 3);
  });

  test('a long warning lead reads in hours, not hundreds of minutes', () => {
    const far = usage({
      cull: cull({ deadline: deadline({ reason: 'max-age', seconds_left: 480 * 60 }) })
    });
    assert.match(cullMessage(far) ?? '', /will be stopped in 8 h, even if in use/);
    const mixed = usage({ cull: cull({ deadline: deadline({ seconds_left: 90 * 60 }) }) });
    assert.match(cullMessage(mixed) ?? '', /stopped in 1 h 30 min unless/);
  });

  test('a busy server shows no idle deadline: a running cell is use, and the time would move on', () => {
    const idle = cull({ deadline: deadline({ warning: false, seconds_left: 1200 }) });
    assert.deepEqual(cullRows(idle, true)[2], [
      'Next stop',
      'none while in use: a cell is running'
    ]);
    const demand = cull({ deadline: deadline({ reason: 'demand', seconds_left: 600 }) });
    assert.deepEqual(cullRows(demand, true)[2], [
      'Next stop',
      'none while in use: a cell is running'
    ]);
    // A maximum age comes whether or not a cell runs.
    const maxAge = cull({ deadline: deadline({ reason: 'max-age', seconds_left: 240 }) });
    assert.deepEqual(cullRows(maxAge, true)[2], [
      'Stops in',
      '4 min at its maximum age, even if used'
    ]);
    // Nor is an unused GPU a maximum age.
    const unused = cull({ deadline: deadline({ reason: 'gpu-unused-busy', seconds_left: 240 }) });
    assert.deepEqual(cullRows(unused, true)[2], [
      'Stops in',
      '4 min, even while a cell runs, unless it uses the GPU'
    ]);
  });

  test('a passed deadline still reads as a minute away, never 0', () => {
    const rows = cullRows(cull({ deadline: deadline({ seconds_left: 0 }) }));
    assert.deepEqual(rows[2], ['Stops in', '1 min unless used']);
  });

  test('no warning, no notification; no service, nothing', () => {
    assert.equal(
      cullMessage(usage({ cull: cull({ deadline: deadline({ warning: false }) }) })),
      null
    );
    assert.equal(cullMessage(usage()), null);
  });

  test('every message fits a toast and reads as text', () => {
    for (const reason of ['idle', 'demand', 'max-age'] as const) {
      for (const seconds of [0, 59, 60, 61, 899]) {
        const message = cullMessage(
          usage({ cull: cull({ deadline: deadline({ reason, seconds_left: seconds }) }) })
        );
        assert.ok(message !== null && message.length <= 140, message ?? '');
        assertReadable(message);
      }
    }
  });
});
